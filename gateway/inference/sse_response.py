"""Sending an SSE response over bare ASGI: headers, frames (coalesced when several are ready),
`: keepalive` after upstream silence, and noticing the client leave."""

from __future__ import annotations

import trio

from gateway.server.asgi import Receive, Scope, Send
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


class Pump:
    """Moves frames from the relay's channel to the client. `frames_sent` (data frames
    written to the client, less the end's `[DONE]` and error frame: the relayed content for
    an estimate) stays readable after a cancellation (the client left), so what was relayed
    can be accounted."""

    def __init__(self, send: Send, keepalive_s: float) -> None:
        self._send = send
        self._keepalive_s = keepalive_s
        self.frames_sent = 0

    async def run(self, frames: trio.MemoryReceiveChannel[bytes]) -> None:
        """Send every frame until the channel closes, then end the body. Cancellation stops
        at once; nothing more is sent."""
        send = self._send
        async with frames:
            ended = False
            while not ended:
                with trio.move_on_after(self._keepalive_s) as silence:
                    try:
                        batch = [await frames.receive()]
                    except trio.EndOfChannel:
                        break
                if silence.cancelled_caught:
                    await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
                    continue
                while len(batch) < 64:  # whatever else is ready goes in the same write
                    try:
                        batch.append(frames.receive_nowait())
                    except trio.WouldBlock:
                        break
                    except trio.EndOfChannel:
                        ended = True  # the end of the body goes in that write too
                        break
                body = batch[0] if len(batch) == 1 else b"".join(batch)
                frames_in = body.count(b"data: ")
                if body.endswith(DONE):
                    # The end marker ends the body, in the same write: a client may leave as
                    # soon as it read it, and its stream was whole (no 499 for it).
                    ended = True
                    frames_in -= 1 + body.count(_ERROR_FRAME)  # not content
                await send({"type": "http.response.body", "body": body, "more_body": not ended})
                self.frames_sent += frames_in
            if not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})


async def cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    """Wait for the client to go away (the request body was already read), then cancel."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return
