"""Where a stored image is served: `<public base URL>/v1/images/content/<token>`. Without
`GATEWAY_PUBLIC_BASE_URL` the base is `http://<Host>` from the request, once the Host header
is a plain host[:port] (docs/decisions.md, "Images: URLs")."""

from __future__ import annotations

import ipaddress
import string

from protocol.errors import invalid_request

CONTENT_PATH = "/v1/images/content/{token}"
_LABEL_CHARS = frozenset(string.ascii_letters + string.digits + "-")


def base_url(public_base_url: str | None, host: str | None) -> str:
    """The base of image URLs; 400 when it must come from a Host header that is not usable."""
    if public_base_url is not None:
        return public_base_url
    if host is None or not usable_host(host):
        raise invalid_request(
            "The request has no usable Host header to build image URLs from (set"
            " GATEWAY_PUBLIC_BASE_URL, or ask for response_format b64_json).",
            param="response_format",
        )
    return f"http://{host}"


def image_url(base: str, token: str) -> str:
    return base + CONTENT_PATH.format(token=token)


def usable_host(host: str) -> bool:
    """Whether a Host header is a plain `name[:port]`, `IPv4[:port]` or `[IPv6][:port]`.
    Checked without a regular expression: the header is the client's, and a backtracking
    pattern over it once let a 28-character Host stall the process for seconds."""
    if len(host) > 261:
        return False
    if host.startswith("["):
        address, bracket, port = host[1:].partition("]")
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            return False
        return bool(bracket) and (not port or _port(port))
    name, colon, port = host.partition(":")
    if colon and not _port(colon + port):
        return False
    labels = name.removesuffix(".").split(".")
    return all(
        0 < len(label) <= 63
        and set(label) <= _LABEL_CHARS
        and not label.startswith("-")
        and not label.endswith("-")
        for label in labels
    )


def _port(text: str) -> bool:
    digits = text[1:]
    return text[:1] == ":" and 0 < len(digits) <= 5 and digits.isascii() and digits.isdigit()
