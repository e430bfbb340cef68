"""Whether a subscription's `url` may be stored: its form, then the addresses its host has now.

Checked when a subscription is created or its URL changed, so a mistake is answered at once
(400 naming `url`). It is no protection by itself: DNS can answer differently later, so every
delivery resolves and checks again and connects only to an address it checked
(actors/webhooks/sender.py). The rules:

- `https://` (also `http://` with `[webhooks] allow_http`), a host, printable ASCII only (an
  internationalised name is given in its `xn--` form), no user:password part, no fragment;
- the host (an IP literal, or every address a name resolves to) must not be loopback, private,
  link-local, … (protocol/netguard.py) unless inside `[webhooks] allowed_private_networks`;
- a name that does not resolve (within a few seconds) is refused: it could not be delivered to,
  and nothing could be checked.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import SplitResult, urlsplit

import trio

from gateway.config.schema import WebhooksConfig
from protocol.errors import APIError, invalid_request
from protocol.netguard import Address, Network, parse_address, refusal

RESOLVE_TIMEOUT_S = 5.0


def _invalid(message: str) -> APIError:
    return invalid_request(message, param="url", code="invalid_webhook_url")


def _refused(why: str) -> APIError:
    return invalid_request(
        f"`url` resolves to a {why} address, which webhooks may not reach (an operator can allow"
        " such networks with [webhooks] allowed_private_networks).",
        param="url",
        code="webhook_url_not_allowed",
    )


def parse_target(url: str, *, allow_http: bool) -> SplitResult:
    """The URL's parts when its form is acceptable; APIError 400 (param `url`) otherwise."""
    if not all(" " < c <= "~" for c in url):
        raise _invalid("`url` must be printable ASCII without spaces (percent-encode the rest).")
    parts = urlsplit(url)
    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme.lower() not in schemes:
        raise _invalid(
            "`url` must be an https:// URL."
            if not allow_http
            else "`url` must be an https:// or http:// URL."
        )
    if "@" in parts.netloc:
        raise _invalid("`url` must not contain a user name or password.")
    if parts.fragment or url.endswith("#"):
        raise _invalid("`url` must not have a #fragment (it is never sent).")
    if not parts.hostname:
        raise _invalid("`url` must name a host.")
    try:
        port = parts.port
    except ValueError:
        raise _invalid("`url` has an invalid port.") from None
    if port == 0:
        raise _invalid("`url` has an invalid port.")
    return parts


async def resolve(host: str, port: int) -> list[Address]:
    """Every address `host` has now; empty when it does not resolve in time."""
    with trio.move_on_after(RESOLVE_TIMEOUT_S):
        try:
            infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):  # socket.gaierror is an OSError
            return []
        out: list[Address] = []
        for family, _, _, _, sockaddr in infos:
            if family in (socket.AF_INET, socket.AF_INET6):
                out.append(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
        return out
    return []


async def check_target(url: str, config: WebhooksConfig) -> None:
    """APIError 400 (param `url`) unless `url` may be subscribed (see the module docstring)."""
    parts = parse_target(url, allow_http=config.allow_http)
    host = parts.hostname
    assert host is not None
    allowed: Sequence[Network] = config.allowed_private_networks
    literal = parse_address(host)
    if literal is not None:
        addresses = [literal]
    else:
        default_port = 443 if parts.scheme.lower() == "https" else 80
        addresses = await resolve(host, parts.port or default_port)
        if not addresses:
            raise _invalid(f"`url`: the host {host!r} could not be resolved.")
    for address in addresses:
        why = refusal(address, allowed)
        if why is not None:
            raise _refused(why)
