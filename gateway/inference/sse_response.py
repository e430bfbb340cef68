"""Sending an SSE response over bare ASGI: headers, the relay's frames (actors/relay.py writes
them, `: keepalive` included), and noticing the client leave."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from gateway.errors import ClientDisconnected
from gateway.server.asgi import Receive, Scope, Send
from gateway.web.request import Request
from gateway.web.responses import Headers
from protocol.sse import DONE, KEEPALIVE

_ERROR_FRAME = b'data: {"error":'  # a broken stream's last frame before `[DONE]`
_SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # proxies such as nginx must not buffer the stream
]


async def start_sse(scope: Scope, send: Send, extra: Headers) -> None:
    headers = [*_SSE_HEADERS, *extra]
    if scope.get("http_version", "1.1").startswith("1"):
        headers.append((b"connection", b"keep-alive"))  # connection headers are illegal in h2
    await send({"type": "http.response.start", "status": 200, "headers": headers})


class ClientStream:
    """The client's SSE response, as a relay's `FrameSink` (actors/relay.py): the relay's
    task writes the frames of each upstream read in one write. `frames_sent` (data frames
    written, less the end's `[DONE]` and error frame: the relayed content for an estimate)
    stays readable after a cancellation (the client left), so what was relayed can be
    accounted. With `hold_last`, each write is held until the next one comes, so the stream's
    last frames wait for `finish(before_last)` (keep-alives are never held)."""

    def __init__(self, request: Request, *, hold_last: bool = False) -> None:
        self._request = request
        self._send = request.send
        self._hold_last = hold_last
        self._held: bytes | None = None
        self.ended = False  # the end of the body was written
        self.left = False  # a write found the client gone
        self.frames_sent = 0
        self.opened_at: float | None = None  # Trio's clock, when the response began

    async def open(self) -> bool:
        http = self._request
        http.started = True
        self.opened_at = trio.current_time()
        try:
            await start_sse(http.scope, self._send, http.headers)
        except ClientDisconnected:
            self.left = True
            return False
        return True

    async def write(self, data: bytes) -> bool:
        if self._hold_last and data != KEEPALIVE:
            held, self._held = self._held, data
            if held is None:
                return True
            data = held
        return await self._body(data)

    async def finish(self, before_last: Callable[[], Awaitable[None]] | None = None) -> None:
        """After the relay ended: the held frames (after `before_last`), then the end of the
        body if the frames did not end it. ClientDisconnected if the client left."""
        if self.left:
            raise ClientDisconnected("the client left during the stream")
        if before_last is not None:
            await before_last()
        held, self._held = self._held, None
        if held is not None and not await self._body(held):
            raise ClientDisconnected("the client left during the stream")
        if not self.ended:
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _body(self, body: bytes) -> bool:
        frames_in = body.count(b"data: ")
        if body.endswith(DONE):
            # The end marker ends the body, in the same write: a client may leave as soon as
            # it read it, and its stream was whole (no 499 for it).
            self.ended = True
            frames_in -= 1 + body.count(_ERROR_FRAME)  # not content
        try:
            await self._send(
                {"type": "http.response.body", "body": body, "more_body": not self.ended}
            )
        except ClientDisconnected:
            self.left = True
            return False
        self.frames_sent += frames_in
        return True


async def cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    """Wait for the client to go away (the request body was already read), then cancel."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return
