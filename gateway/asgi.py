"""Bare-ASGI request and response helpers for the hot-path routes (no framework objects).

`read_body` enforces the body limit on every transfer encoding; `send_json` and `send_error`
answer in one `http.response.start` + one body message.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.middleware import Message, Receive, Scope, Send
from protocol.errors import APIError

JSON = b"application/json"
Headers = list[tuple[bytes, bytes]]


class ClientDisconnected(Exception):
    """The client went away before its request body was read."""


def header(scope: Scope, name: bytes) -> str | None:
    """A request header's value (first occurrence); `name` lower-case."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body; APIError 413 past `limit` (declared or chunked)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise body_too_large()
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def body_too_large() -> APIError:
    return APIError(
        413,
        "The request body is too large.",
        type="invalid_request_error",
        code="request_too_large",
        headers={"Connection": "close"},  # the rest of the body is never read
    )


def _encode_headers(headers: Iterable[tuple[str, str]]) -> Headers:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]


async def send_json(send: Send, status: int, body: bytes, headers: Headers | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", JSON),
                (b"content-length", str(len(body)).encode()),
                *(headers or ()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_error(send: Send, error: APIError, headers: Headers | None = None) -> None:
    extra = [*(headers or ()), *_encode_headers(error.headers.items())]
    await send_json(send, error.status, error.body(), extra)
