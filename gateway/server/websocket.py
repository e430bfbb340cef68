"""A WebSocket connection on the built-in server, after llhttp read the upgrade request: the
ASGI websocket scope's `receive` and `send` (websocket.connect / accept / receive / send /
close / disconnect), framing by wsproto. No routing, no HTTP: gateway/server/http1.py hands
over the connection once it saw the handshake, and closes the socket after `serve_websocket`.

One reader task reads frames only after the app accepted and only as fast as the app takes
messages (a bounded inbox); it answers pings and the peer's close. A message past
`max_message_bytes` closes the connection with 1009. Closing before accept answers 403; an
app that fails or returns without accepting gets 500, and after accepting a close with 1011
(failure) or 1000 (return). Writes from the app and the reader take turns (one lock).
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    TextMessage,
)
from wsproto.events import Request as WSRequest
from wsproto.utilities import RemoteProtocolError

from gateway.errors import ClientDisconnected, HandshakeError
from gateway.server.asgi import ASGIApp, Message
from gateway.server.connection import Connection
from protocol.http1_server import Request

log = logging.getLogger("gateway.http")
_INBOX = 16  # messages read ahead of the app
_CLOSE_WAIT_S = 2.0  # how long our close waits for the peer's
_MESSAGE_TOO_BIG = 1009
_INTERNAL_ERROR = 1011


class WebSocket:
    def __init__(
        self, conn: Connection, head: Request, rest: bytes, *, max_message_bytes: int
    ) -> None:
        self._conn = conn
        self._ws = WSConnection(ConnectionType.SERVER)
        try:
            self._ws.initiate_upgrade_connection(head.headers, head.target)
            event = next(self._ws.events())
        except (RemoteProtocolError, StopIteration) as exc:
            raise HandshakeError(str(exc)) from None
        assert isinstance(event, WSRequest)
        self.subprotocols = list(event.subprotocols)
        self._rest = rest
        self._max = max_message_bytes
        self._to_app, self._inbox = trio.open_memory_channel[Message](_INBOX)
        self._write_lock = trio.Lock()
        self._accepted = trio.Event()
        self._reader_done = trio.Event()
        self._connect_sent = False
        self._answered = False  # accepted or rejected: the handshake's answer is written
        self.close_code = 1006  # until a close frame says otherwise

    # The ASGI callables ------------------------------------------------------------------------

    async def receive(self) -> Message:
        """The next message; `websocket.disconnect` (with the close code) once closed."""
        if not self._connect_sent:
            self._connect_sent = True
            return {"type": "websocket.connect"}
        try:
            return await self._inbox.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return {"type": "websocket.disconnect", "code": self.close_code}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        state = self._ws.state
        if kind == "websocket.accept" and state is ConnectionState.CONNECTING:
            headers = list(message.get("headers") or ())
            accept = AcceptConnection(subprotocol=message.get("subprotocol"), extra_headers=headers)
            self._answered = True
            await self._write(self._ws.send(accept))
            self._accepted.set()
        elif kind == "websocket.close" and state is ConnectionState.CONNECTING:
            await self.reject(403)
        elif kind == "websocket.close" and state is ConnectionState.OPEN:
            code = int(message.get("code") or 1000)
            await self._write(self._ws.send(CloseConnection(code, message.get("reason") or None)))
        elif kind == "websocket.send" and state is ConnectionState.OPEN:
            text = message.get("text")
            event = TextMessage(text) if text is not None else BytesMessage(message["bytes"])
            await self._write(self._ws.send(event))
        elif kind in ("websocket.send", "websocket.close") and state is not ConnectionState.OPEN:
            raise ClientDisconnected  # the connection is closing or closed
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r} in state {state.name}")

    # Server side -------------------------------------------------------------------------------

    async def reject(self, status: int) -> None:
        if self._answered:
            return
        self._answered = True
        await self._write(self._ws.send(RejectConnection(status_code=status, has_body=False)))

    async def finish(self, failed: bool) -> None:
        """After the app returned (or failed): answer the handshake if it never did, or close
        with 1000/1011 and wait a moment for the peer's close."""
        try:
            if not self._answered:
                await self.reject(500)
                return
            if self._ws.state is ConnectionState.OPEN:
                code = _INTERNAL_ERROR if failed else 1000
                await self._write(self._ws.send(CloseConnection(code)))
            with trio.move_on_after(_CLOSE_WAIT_S):
                await self._reader_done.wait()
        except ClientDisconnected:
            pass

    async def read_frames(self) -> None:
        """Reads frames once accepted, until the connection closes (see module docstring)."""
        await self._accepted.wait()
        ws = self._ws
        parts: list[bytes | bytearray | str] = []
        size = 0
        try:
            if self._rest:
                ws.receive_data(self._rest)
            while True:
                for event in ws.events():
                    if isinstance(event, TextMessage | BytesMessage):
                        size += len(event.data)
                        if size > self._max:
                            await self._close(_MESSAGE_TOO_BIG, "message too big")
                            return
                        parts.append(event.data)
                        if event.message_finished:
                            await self._to_app.send(_message(parts))
                            parts, size = [], 0
                    elif isinstance(event, Ping):
                        await self._write(ws.send(event.response()))
                    elif isinstance(event, CloseConnection):
                        self.close_code = event.code
                        if ws.state is ConnectionState.REMOTE_CLOSING:
                            await self._write(ws.send(event.response()))
                        elif ws.state is ConnectionState.OPEN:  # a frame wsproto refused
                            await self._close(event.code, event.reason or "")
                        return
                if ws.state is ConnectionState.CLOSED:
                    return
                data = await self._conn.receive_raw()
                ws.receive_data(data or None)  # None: the TCP connection ended (1006)
        except ClientDisconnected:
            pass
        finally:
            self._reader_done.set()
            self._to_app.close()

    async def _close(self, code: int, reason: str) -> None:
        self.close_code = code
        if self._ws.state is ConnectionState.OPEN:
            await self._write(self._ws.send(CloseConnection(code, reason)))

    async def _write(self, data: bytes) -> None:
        async with self._write_lock:
            await self._conn.write(data)


def _message(parts: list[bytes | bytearray | str]) -> Message:
    if isinstance(parts[0], str):
        return {"type": "websocket.receive", "text": "".join(parts)}  # type: ignore[arg-type]
    return {"type": "websocket.receive", "bytes": b"".join(parts)}  # type: ignore[arg-type]


async def serve_websocket(
    app: ASGIApp,
    conn: Connection,
    head: Request,
    rest: bytes,
    scope: dict[str, Any],
    *,
    max_message_bytes: int,
) -> None:
    """Run the app on one WebSocket connection until both are done. Raises HandshakeError for
    a handshake wsproto refuses (nothing was written yet)."""
    ws = WebSocket(conn, head, rest, max_message_bytes=max_message_bytes)
    scope = {**scope, "type": "websocket", "scheme": "ws", "subprotocols": ws.subprotocols}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ws.read_frames)
        failed = False
        try:
            await app(scope, ws.receive, ws.send)
        except ClientDisconnected:
            pass
        except Exception:
            failed = True
            log.exception("unhandled error in the app on WebSocket %r", scope["raw_path"])
        await ws.finish(failed)
        nursery.cancel_scope.cancel()
