"""Responses over bare ASGI. A whole body goes out as one `http.response.start` plus one body
message; a stream as a start plus one message per chunk. No framework objects.

`Response` and `StreamResponse` are what handlers return; `send_json` is for handlers that
answer themselves (the inference routes).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any

import msgspec
import trio

from gateway.server.asgi import Send

JSON = b"application/json"
Headers = list[tuple[bytes, bytes]]
_encode = msgspec.json.encode


def encode_headers(headers: Iterable[tuple[str, str]]) -> Headers:
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


class Response:
    """A whole body: JSON by default."""

    __slots__ = ("body", "content_type", "headers", "status")

    def __init__(
        self,
        body: bytes,
        status: int = 200,
        *,
        content_type: bytes = JSON,
        headers: Headers | None = None,
    ) -> None:
        self.body = body
        self.status = status
        self.content_type = content_type
        self.headers = headers

    async def send(self, send: Send, extra: Headers) -> None:
        headers = [
            (b"content-type", self.content_type),
            (b"content-length", b"%d" % len(self.body)),
        ]
        if self.headers:
            headers += self.headers
        if extra:
            headers += extra
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


def json_response(value: Any, status: int = 200, headers: Headers | None = None) -> Response:
    """`value` encoded with msgspec (structs, dicts, lists...)."""
    return Response(_encode(value), status, headers=headers)


class StreamResponse:
    """A body of unknown length, sent chunk by chunk as `chunks` yields them. When the client
    leaves, the server's `send` raises and the iteration stops there."""

    __slots__ = ("chunks", "content_type", "headers", "status")

    def __init__(
        self,
        chunks: AsyncIterable[bytes],
        status: int = 200,
        *,
        content_type: bytes,
        headers: Headers | None = None,
    ) -> None:
        self.chunks = chunks
        self.status = status
        self.content_type = content_type
        self.headers = headers

    async def send(self, send: Send, extra: Headers) -> None:
        headers = [(b"content-type", self.content_type), *(self.headers or ()), *extra]
        try:
            await send({"type": "http.response.start", "status": self.status, "headers": headers})
            async for chunk in self.chunks:
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:  # the client left (or a chunk failed): close a generator's files and streams now
            aclose = getattr(self.chunks, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True):
                    await aclose()
