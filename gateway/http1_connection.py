"""One client connection of the built-in HTTP/1.1 server, and one request/response on it:
the ASGI `receive` and `send` callables, response framing, unread bodies, lingering close.
No listening, no app dispatch: that is gateway/http1_server.py.
"""

from __future__ import annotations

import time
from email.utils import formatdate
from http import HTTPStatus

import trio

from gateway.middleware import Message
from protocol.http1 import BodyReader, HTTPProtocolError, RequestHead

RECEIVE_BYTES = 65536
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


class ClientGone(Exception):
    pass


class Exchange:
    """One request/response on a connection: the ASGI receive and send callables."""

    def __init__(
        self, conn: Connection, head: RequestHead, body: BodyReader, leftover: bytes
    ) -> None:
        self._conn = conn
        self._head = head
        self._body = body
        self._pending = self._feed(leftover) if leftover else b""
        self._continue_due = head.expects_continue and not body.done
        self._request_done = False
        self.status: int | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._chunked = False
        self.started = False  # head written
        self.finished = False  # whole response written
        self.keep_alive = head.keep_alive

    def _feed(self, raw: bytes) -> bytes:
        data = self._body.feed(raw)
        if self._body.excess:  # the next request's first bytes: keep them for it
            self._conn.buffer += self._body.excess
            self._body.excess = b""
        return data

    async def receive(self) -> Message:
        if not self._request_done:
            if self._pending or self._body.done:
                data, self._pending = self._pending, b""
                self._request_done = self._body.done
                return {"type": "http.request", "body": data, "more_body": not self._body.done}
            if self._continue_due:
                self._continue_due = False
                await self._conn.write(_CONTINUE)
            while True:
                raw = await self._conn.read()
                if not raw:
                    self._conn.closed = True
                    return {"type": "http.disconnect"}
                try:
                    data = self._feed(raw)
                except HTTPProtocolError:
                    self.keep_alive = False
                    return {"type": "http.disconnect"}
                if data or self._body.done:
                    self._request_done = self._body.done
                    return {"type": "http.request", "body": data, "more_body": not self._body.done}
        # The body was read: the next message is the client leaving.
        await self._conn.wait_closed()
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
            await self._conn.write(b"".join(out))

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
        if not self.keep_alive or self._conn.draining():
            self.keep_alive = False
            lines.append(b"connection: close\r\n")
        lines += [b"date: ", _date.value(), b"\r\n\r\n"]
        return b"".join(lines)

    async def discard_body(self) -> None:
        """Read and drop the rest of a small request body the app did not read (say, it
        answered 401 first), so the connection stays usable; large ones are left unread."""
        if self._continue_due:
            return  # the client waits for 100 Continue: it will not send the body at all
        with trio.move_on_after(_DISCARD_S):
            dropped = len(self._pending)
            self._pending = b""
            while not self._body.done and dropped <= _DISCARD_LIMIT:
                raw = await self._conn.read()
                if not raw:
                    self._conn.closed = True
                    return
                try:
                    dropped += len(self._feed(raw))
                except HTTPProtocolError:
                    return
            self._request_done = self._body.done

    @property
    def request_done(self) -> bool:
        return self._request_done

    @property
    def client_gone(self) -> bool:
        return self._conn.closed


class Connection:
    def __init__(self, stream: trio.SocketStream, draining: trio.Event) -> None:
        self.stream = stream
        self._draining = draining
        self.buffer = b""
        self.closed = False

    def draining(self) -> bool:
        return self._draining.is_set()

    async def read(self) -> bytes:
        if self.buffer:
            data, self.buffer = self.buffer, b""
            return data
        return await self.read_more()

    async def wait_closed(self) -> None:
        """Until the client closes (bytes of a next request are kept for later)."""
        while not self.closed:
            data = await self.read_more()
            if not data:
                self.closed = True
                return
            self.buffer += data

    async def read_more(self) -> bytes:
        """Bytes from the socket (b"" once closed). One reader at a time: the app reads the
        body or waits for the disconnect, never both at once (trio raises if that breaks)."""
        try:
            return await self.stream.receive_some(RECEIVE_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return b""

    async def linger(self) -> None:
        """Close our side, then read and drop what the client still sends for a moment, so
        closing with unread bytes does not reset the connection before it read our answer."""
        with trio.move_on_after(_DISCARD_S):
            try:
                await self.stream.send_eof()
                while await self.read_more():
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

    async def write(self, data: bytes) -> None:
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.closed = True
            raise ClientGone from None
