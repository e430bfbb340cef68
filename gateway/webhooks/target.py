"""Whether a subscription's `url` may be stored: its form, then the addresses its host has now.

Checked when a subscription is created or its URL changed, so a mistake is answered at once
(400 naming `url`). The form and the address check are the delivery sender's own
(actors/webhooks/sender.py `check_url`), so the API accepts exactly what can be
sent. It is no protection by itself: DNS can answer differently later, so every delivery
resolves and checks again and connects only to an address it checked. The rules:

- `https://` (also `http://` with `[webhooks] allow_http`), a host, printable ASCII only (an
  internationalised name is given in its `xn--` form), no user:password part, no `%` in the
  host (an IPv6 zone id, or a name percent-encoded); and here also no `#fragment` (it would
  never be sent: a receiver relying on it would be surprised);
- the host (an IP literal, or every address a name resolves to) must not be loopback, private,
  link-local, … (protocol/netguard.py) unless inside `[webhooks] allowed_private_networks`;
- the port is the scheme's own (443, or 80 for http) or in `[webhooks] allowed_ports`, unless
  every address is inside `allowed_private_networks`;
- a name that does not resolve (within a few seconds) is refused: it could not be delivered to,
  and nothing could be checked.

Messages name the problem and the address class, never an address or the URL's path (which
may carry a receiver's token).
"""

from __future__ import annotations

from actors.errors import PortRefused, Refused
from actors.webhooks.sender import check_url
from gateway.config.schema import WebhooksConfig
from protocol.errors import APIError, invalid_request

RESOLVE_TIMEOUT_S = 5.0


def _invalid(problem: str) -> APIError:
    return invalid_request(f"`url`: {problem}.", param="url", code="invalid_webhook_url")


def _refused(why: str) -> APIError:
    return invalid_request(
        f"`url` resolves to a {why} address, which webhooks may not reach (an operator can allow"
        " such networks with [webhooks] allowed_private_networks).",
        param="url",
        code="webhook_url_not_allowed",
    )


def _port_refused(port: int) -> APIError:
    return invalid_request(
        f"`url` names port {port}: webhooks are delivered to the scheme's own port (443 for"
        " https, 80 for http) only, unless an operator allows others with"
        " [webhooks] allowed_ports.",
        param="url",
        code="webhook_url_not_allowed",
    )


async def check_target(url: str, config: WebhooksConfig) -> None:
    """APIError 400 (param `url`) unless `url` may be subscribed (see the module docstring)."""
    if "#" in url:
        raise _invalid("the URL must not have a #fragment (it is never sent)")
    try:
        await check_url(
            url,
            allowed_networks=config.allowed_private_networks,
            allow_http=config.allow_http,
            allowed_ports=config.allowed_ports,
            timeout_s=RESOLVE_TIMEOUT_S,
        )
    except Refused as exc:
        raise _refused(exc.why) from None
    except PortRefused as exc:
        raise _port_refused(exc.port) from None
    except ValueError as exc:
        raise _invalid(str(exc)) from None
