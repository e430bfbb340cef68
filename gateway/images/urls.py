"""Where a stored image is served: `<public base URL>/v1/images/content/<token>`. Without
`GATEWAY_PUBLIC_BASE_URL` the base is `http://<Host>` from the request, once the Host header
is a plain host[:port] (docs/decisions.md, "Images: URLs")."""

from __future__ import annotations

import re

from protocol.errors import invalid_request

CONTENT_PATH = "/v1/images/content/{token}"
_HOST = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+(?::[0-9]{1,5})?|"
    r"\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?"
)


def base_url(public_base_url: str | None, host: str | None) -> str:
    """The base of image URLs; 400 when it must come from a Host header that is not usable."""
    if public_base_url is not None:
        return public_base_url
    if host is None or len(host) > 261 or not _HOST.fullmatch(host):
        raise invalid_request(
            "The request has no usable Host header to build image URLs from (set"
            " GATEWAY_PUBLIC_BASE_URL, or ask for response_format b64_json).",
            param="response_format",
        )
    return f"http://{host}"


def image_url(base: str, token: str) -> str:
    return base + CONTENT_PATH.format(token=token)
