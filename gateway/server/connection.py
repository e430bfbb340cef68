"""One client connection of the built-in HTTP/1.1 server, and one request/response on it:
the ASGI `receive` and `send` callables, response framing, unread bodies, lingering close.
No listening, no app dispatch: that is gateway/server/http1.py. Framing of requests is the
parser's (protocol/http1_server.py); this module only moves bytes between it and the socket.

Reading is on demand: the socket is read only when the server needs the next request's head,
when the app asks for body bytes (back-pressure: an unread body stays in the kernel), or while
the app waits for the client to leave — then at most `HOLD_BYTES` of what the client sends are
kept, and past that the socket is left alone (a client gone is noticed by the next failed
write, which also ends that wait).
"""

from __future__ import annotations

import time
from email.utils import formatdate
from http import HTTPStatus

import trio

from gateway.errors import ClientDisconnected
from gateway.server.asgi import Message
from protocol.http1_server import END, Body, Event, Reject, Request, RequestParser

RECEIVE_BYTES = 65536
HOLD_BYTES = 65536  # bytes kept from a client that sends while its response is written
_DISCARD_LIMIT = 1024 * 1024  # unread request body worth reading past to keep the connection
_DISCARD_S = 2.0
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


class _Date:
    """The Date header, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def value(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = formatdate(now, usegmt=True).encode()
        return self._value


_date = _Date()


class Exchange:
    """One request/response on a connection: the ASGI receive and send callables."""

    def __init__(self, conn: Connection, head: Request, body_timeout: float) -> None:
        self._conn = conn
        self._head = head
        self._body_timeout = body_timeout
        self._continue_due = head.expects_continue
        self._request_done = False
        self.status: int | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._chunked = False
        self.started = False  # head written
        self.finished = False  # whole response written
        self.keep_alive = head.keep_alive
        self.error: Reject | None = None  # the body broke framing, ended early, or stalled

    async def receive(self) -> Message:
        """The next body part, or `http.disconnect` once the client left (or the body broke
        framing, ended before its end, or stalled: then `error` says what the server answers).
        After the whole body: waits until the client leaves. Cancelling it loses nothing."""
        conn = self._conn
        if self._request_done or self.error is not None:
            await conn.wait_disconnect()
            return {"type": "http.disconnect"}
        event = conn.next_event()
        if event is None:
            if self._continue_due:
                self._continue_due = False
                await conn.write(_CONTINUE)
            with trio.move_on_after(self._body_timeout) as stalled:
                event = await conn.event()
            if stalled.cancelled_caught:
                return self._fail(Reject(408, "The request body stalled."))
        self._continue_due = False
        if type(event) is Body:
            data = event.data
            events = conn.parser.events
            if events and type(events[0]) is Body:  # several chunks arrived together
                parts = [data]
                while events and type(events[0]) is Body:
                    parts.append(events.popleft().data)  # type: ignore[union-attr]
                data = b"".join(parts)
            if events and events[0] is END:
                events.popleft()
                self._request_done = True
            return {"type": "http.request", "body": data, "more_body": not self._request_done}
        if event is END:
            self._request_done = True
            return {"type": "http.request", "body": b"", "more_body": False}
        if type(event) is Reject:
            return self._fail(event)
        if conn.broken:
            return {"type": "http.disconnect"}  # the client is gone
        # The client closed its sending side before the body's end (declared length or last
        # chunk): a truncated upload. It may still read: the server answers 400.
        return self._fail(
            Reject(
                400,
                "The request body ended early: the client closed its "
                "side of the connection before sending all of it.",
            )
        )

    def _fail(self, error: Reject) -> Message:
        self.error = error
        self.keep_alive = False
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = int(message["status"])
            self._headers = list(message.get("headers", ()))
            return
        if kind != "http.response.body" or self.finished or self._conn.closed:
            return
        body: bytes = message.get("body", b"")
        more = bool(message.get("more_body", False))
        out: list[bytes] = []
        if not self.started:
            out.append(self._encode_head(len(body) if not more else None))
            self.started = True
        if self._head.method == "HEAD":
            body = b""
        if self._chunked:
            if body:
                out += [b"%x\r\n" % len(body), body, b"\r\n"]
            if not more:
                out.append(b"0\r\n\r\n")
        elif body:
            out.append(body)
        if not more:
            self.finished = True
        if out:
            await self._conn.write(b"".join(out) if len(out) > 1 else out[0])

    def _encode_head(self, whole_length: int | None) -> bytes:
        status = self.status or 500
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b""))]
        has_length = False
        for name, value in self._headers:
            lowered = name.lower()
            if lowered == b"content-length":
                has_length = True
            elif lowered == b"connection" and b"close" in value.lower():
                self.keep_alive = False
            lines += [name, b": ", value, b"\r\n"]
        if not has_length:
            if whole_length is not None:
                lines.append(b"content-length: %d\r\n" % whole_length)
            elif self._head.http_version == "1.1":
                self._chunked = True
                lines.append(b"transfer-encoding: chunked\r\n")
            else:
                self.keep_alive = False
        if not self._request_done and (self._head.content_length or 0) > _DISCARD_LIMIT:
            self.keep_alive = False  # answered before reading a body too large to drop
        if not self.keep_alive or self._conn.draining():
            self.keep_alive = False
            lines.append(b"connection: close\r\n")
        lines += [b"date: ", _date.value(), b"\r\n\r\n"]
        return b"".join(lines)

    async def discard_body(self) -> None:
        """Read and drop the rest of a small request body the app did not read (say, it
        answered 401 first), so the connection stays usable; large ones are left unread (the
        caller then closes)."""
        if self._continue_due or self.error is not None:
            return  # a client waiting for 100 Continue will not send the body at all
        conn = self._conn
        dropped = 0
        with trio.move_on_after(_DISCARD_S):
            while dropped <= _DISCARD_LIMIT:
                event = conn.next_event() or await conn.event()
                if type(event) is Body:
                    dropped += len(event.data)
                elif event is END:
                    self._request_done = True
                    return
                else:
                    return

    @property
    def conn(self) -> Connection:
        return self._conn

    @property
    def request_done(self) -> bool:
        return self._request_done

    @property
    def client_gone(self) -> bool:
        return self._conn.closed


class Connection:
    """The socket, the request parser, and what was read but not parsed yet."""

    def __init__(self, stream: trio.SocketStream, parser: RequestParser, draining: trio.Event):
        self.stream = stream
        self.parser = parser
        self._draining = draining
        # Nothing more comes from the client: EOF, reset, or a failed write. An EOF alone (a
        # half-close) leaves it able to read our answer; `broken` says it cannot.
        self.closed = False
        self.broken = False  # the client reset the connection, or a write to it failed
        self._held = bytearray()  # read while the app waited for a disconnect; not parsed yet
        self._waiter: trio.CancelScope | None = None

    def draining(self) -> bool:
        return self._draining.is_set()

    def next_event(self) -> Event | None:
        """An event from bytes already read, if there is one (no I/O)."""
        events = self.parser.events
        if not events and self._held:
            self.parser.feed(self._held)
            self._held.clear()
        return events.popleft() if events else None

    async def fill(self) -> bool:
        """Read once and feed the parser; False once the client closed (or the parser takes
        no more bytes)."""
        if self.closed or self.parser.done:
            return False
        data = await self.receive_raw()
        if not data:
            return False
        self.parser.feed(data)
        return True

    async def event(self) -> Event | None:
        """The next event, reading as needed; None once the client closed."""
        while (event := self.next_event()) is None:
            if not await self.fill():
                return None
        return event

    async def wait_disconnect(self) -> None:
        """Until the client closes, or a write to it fails. What it sends meanwhile (the next
        request) is kept for later, up to HOLD_BYTES; past that the socket is not read."""
        with trio.CancelScope() as self._waiter:
            try:
                while not self.closed:
                    if len(self._held) >= HOLD_BYTES:
                        await trio.sleep_forever()
                    data = await self.receive_raw()
                    if not data:
                        self.closed = True
                        break
                    self._held += data
            finally:
                self._waiter = None

    async def receive_raw(self) -> bytes:
        """Bytes from the socket (b"" once closed). One reader at a time: the app reads the
        body or waits for the disconnect, never both at once (trio raises if that breaks)."""
        try:
            data = await self.stream.receive_some(RECEIVE_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.broken = True
            data = b""
        if not data:
            self.closed = True
        return data

    async def linger(self) -> None:
        """Close our side, then read and drop what the client still sends for a moment, so
        closing with unread bytes does not reset the connection before it read our answer."""
        with trio.move_on_after(_DISCARD_S):
            try:
                await self.stream.send_eof()
                while await self.stream.receive_some(RECEIVE_BYTES):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

    async def write(self, data: bytes) -> None:
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.closed = self.broken = True
            if self._waiter is not None:
                self._waiter.cancel()
            raise ClientDisconnected from None
