"""A keep-alive HTTP/1.1 connection pool for one upstream origin, on Trio streams.

Measured reason for not using httpx here (docs/decisions.md): httpx's client and transport
layers cost about 1.2 ms of CPU per upstream call on this machine, more than everything else
the gateway does for a request. This pool sends each request in one write; responses are
framed by llhttp through protocol/http1_client.py.

Errors (mapped to the Upstream* errors by actors/upstream.py):

    PoolError
     ├── ConnectFailed     the TCP/TLS connection could not be opened in time
     ├── ConnectionBroken  the peer closed or reset the connection mid-response
     └── ReadTimedOut      no complete head, or no next body bytes, within `read_timeout_s`

A connection goes back to the pool only when its response was read to its end, asked for
keep-alive and had nothing after it; it is reused only if nothing (no byte, no EOF, no reset)
arrived while it was idle — stray bytes from an upstream must never reach another request. A
response not read to its end closes its connection when released: that is how an abandoned
stream stops the provider.
"""

from __future__ import annotations

import math
import select
import ssl
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import outcome
import trio

from protocol.errors import UpstreamMalformed
from protocol.http1_client import (
    ResponseHead,
    ResponseParser,
    format_chunk,
    format_request,
    format_request_head,
)

_RECEIVE = 65536


class PoolError(Exception):
    pass


class ConnectFailed(PoolError):
    pass


class ConnectionBroken(PoolError):
    pass


class ReadTimedOut(PoolError):
    pass


class _Connection:
    __slots__ = ("_poll", "_tls", "stream")

    def __init__(self, stream: trio.SocketStream, tls: trio.SSLStream[trio.SocketStream] | None):
        self.stream: trio.abc.Stream = tls if tls is not None else stream
        self._tls = tls
        # poll, not select: descriptors past FD_SETSIZE (1024) are common under load.
        self._poll = select.poll()
        self._poll.register(stream.socket.fileno(), select.POLLIN)

    def quiet(self) -> bool:
        """Whether nothing arrived while idle: no byte, no EOF, no reset (one poll syscall)."""
        if self._poll.poll(0):
            return False
        tls = self._tls
        # Decrypted bytes, or TLS records trio already took off the socket, count as arrived.
        return tls is None or not (tls.pending() or tls._incoming.pending)


class Response:
    """A response whose head has arrived; the body is read with `next_chunk` or `read`."""

    def __init__(self, parser: ResponseParser, conn: _Connection, first: bytes, timeout: float):
        head = parser.head
        assert head is not None
        self.status = head.status
        self._head = head
        self._parser = parser
        self._conn = conn
        self._pending = first
        self._read_timeout = timeout
        self.keep = True  # False: never reused, whatever the response said

    @property
    def head(self) -> ResponseHead:
        return self._head

    @property
    def headers(self) -> dict[str, str]:
        """Decoded on first use (most calls never need them)."""
        return self._head.headers

    @property
    def complete(self) -> bool:
        return self._parser.done and not self._pending

    @property
    def reusable(self) -> bool:
        return self.keep and self._parser.reusable

    async def next_chunk(self) -> bytes:
        """The next body bytes as they arrive (chunked framing removed); b"" at the end.
        Cancellation leaves the connection unusable; the pool then closes it. (A method, not
        an async generator, so that abandoning a body leaves nothing to finalize.)"""
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        parser = self._parser
        while not parser.done:
            data = await self._receive()
            if not data:
                try:
                    parser.feed_eof()
                except UpstreamMalformed as exc:
                    raise ConnectionBroken(str(exc)) from None
                return b""
            body = parser.feed(data)
            if body:
                return body
        return b""

    async def read(self, max_bytes: int) -> bytes:
        """The rest of the body; UpstreamMalformed once it passes `max_bytes` (a Content-Length
        over it fails before reading)."""
        length = self._head.content_length
        if length is not None and length > max_bytes:
            raise UpstreamMalformed(f"body of {length} bytes, over the {max_bytes} allowed")
        parts: list[bytes] = []
        size = 0
        while chunk := await self.next_chunk():
            size += len(chunk)
            if size > max_bytes:
                raise UpstreamMalformed(f"body over the {max_bytes} bytes allowed")
            parts.append(chunk)
        return b"".join(parts)

    async def read_prefix(self, limit: int) -> bytes:
        """The body's first bytes, about `limit` at most (an error body); the rest stays
        unread, so the connection is closed when released."""
        parts: list[bytes] = []
        size = 0
        while size < limit and (chunk := await self.next_chunk()):
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)

    async def _receive(self) -> bytes:
        # A plain cancel scope, not trio.fail_after (a generator context manager: a few µs
        # per read, and a stream reads once per upstream chunk).
        try:
            with trio.move_on_after(self._read_timeout) as waited:
                data = await self._conn.stream.receive_some(_RECEIVE)
                return data if isinstance(data, bytes) else bytes(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionBroken(type(exc).__name__) from None
        assert waited.cancelled_caught
        raise ReadTimedOut(f"no data for {self._read_timeout} s")


class Http1Pool:
    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        max_idle: int,
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        default = 443 if self._tls else 80
        self.authority = parts.netloc if self._port != default else self._host
        self.base_path = parts.path.rstrip("/")
        self._limit = trio.CapacityLimiter(max_connections)
        self._max_idle = max_idle
        self._idle: list[_Connection] = []
        self._connect_timeout = connect_timeout_s
        self._read_timeout = read_timeout_s
        self._ssl = ssl.create_default_context() if self._tls else None
        self.opened = 0
        self.discarded = 0  # idle connections found closed or not quiet before reuse

    def __repr__(self) -> str:
        return (
            f"<Http1Pool {self.authority} idle={len(self._idle)} opened={self.opened}"
            f" discarded={self.discarded}>"
        )

    @asynccontextmanager
    async def request(
        self, method: str, path: str, headers: bytes, body: bytes
    ) -> AsyncIterator[Response]:
        """Send one request and yield its response once the head arrived. Leaving the block
        returns the connection to the pool if the body was read to its end, else closes it."""
        data = format_request(method, self.base_path + path, self.authority, headers, body)
        async with self._limit:
            conn, response = await self._exchange(data)
            try:
                yield response
            finally:
                if not self._pooled(conn, response):
                    await _close(conn)

    @asynccontextmanager
    async def request_streamed(
        self, method: str, path: str, headers: bytes, chunks: AsyncIterable[bytes]
    ) -> AsyncIterator[Response]:
        """As `request`, with the body sent as it comes from `chunks` (chunked transfer coding:
        `headers` must not frame it), on a new connection: a kept-alive one the server closed
        meanwhile could not be retried once `chunks` was consumed. An exception from `chunks`
        (the client left) passes through and closes the connection. When the upstream answers
        before the body ended (an early 413) and stops reading, that answer is the response."""
        head = format_request_head(method, self.base_path + path, self.authority, headers)
        async with self._limit:
            conn = await self._connect()
            try:
                response = await self._send_streamed(conn, head, chunks)
            except BaseException:
                await _close(conn)
                raise
            try:
                yield response
            finally:
                if not self._pooled(conn, response):
                    await _close(conn)

    def _pooled(self, conn: _Connection, response: Response) -> bool:
        """Put `conn` back in the pool if its response was read to its end and allows reuse
        (and the pool has room); False: the caller closes it."""
        if response.reusable and len(self._idle) < self._max_idle:
            self._idle.append(conn)
            return True
        return False

    async def _send_streamed(
        self, conn: _Connection, head: bytes, chunks: AsyncIterable[bytes]
    ) -> Response:
        """Send the body while watching for the answer: an upstream may answer before the
        body ended (413, 401) and stop reading; the rest is then not sent. The read timeout
        runs from the body's end (an upload may take longer than it); a send that makes no
        progress for that long is a timeout too (an upstream that stopped reading)."""
        answer: list[Response] = []
        failed: list[PoolError | UpstreamMalformed] = []

        async def read_head(scope: trio.CancelScope) -> None:
            try:
                answer.append(await self._read_head(conn, within_s=math.inf))
            except _Stale:
                failed.append(ConnectionBroken("connection closed before the response"))
            except (PoolError, UpstreamMalformed) as exc:
                failed.append(exc)
            scope.cancel()  # the answer (or its failure) is in: stop sending, if still

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_head, nursery.cancel_scope)
            # Captured, not raised here: a nursery would wrap it in an exception group.
            sent = await outcome.acapture(_send_body, conn.stream, head, chunks, self._read_timeout)
            if isinstance(sent, outcome.Value):
                nursery.cancel_scope.deadline = trio.current_time() + self._read_timeout
            else:
                nursery.cancel_scope.cancel()
        if failed:
            raise failed[0]
        if isinstance(sent, outcome.Error) and not isinstance(sent.error, trio.Cancelled):
            sent.unwrap()  # the body's source failed (the client left), or a send timed out
        # (A Cancelled is dropped: ours, or one from outside that the next checkpoint repeats.)
        if not answer:
            raise ReadTimedOut(f"no complete response head in {self._read_timeout} s")
        response = answer[0]
        if not (isinstance(sent, outcome.Value) and sent.value):
            response.keep = False  # the request was cut short: the connection is spent
        return response

    async def _exchange(self, data: bytes) -> tuple[_Connection, Response]:
        while self._idle:
            conn = self._idle.pop()
            if not conn.quiet():  # closed by the server, or sent something unasked
                self.discarded += 1
                await _close(conn)
                continue
            try:  # it may still have been closed just now: then retry elsewhere
                return conn, await self._send(conn, data)
            except _Stale:
                await _close(conn)
            except BaseException:
                await _close(conn)
                raise
        conn = await self._connect()
        try:
            return conn, await self._send(conn, data)
        except _Stale:
            await _close(conn)
            raise ConnectionBroken("connection closed before the response") from None
        except BaseException:
            await _close(conn)
            raise

    async def _send(self, conn: _Connection, data: bytes) -> Response:
        """Send `data` and read the response head (`_read_head`)."""
        try:
            await conn.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            raise _Stale from None
        return await self._read_head(conn, within_s=self._read_timeout)

    async def _read_head(self, conn: _Connection, *, within_s: float) -> Response:
        """Read until the response head is complete, within `within_s` for the whole head.
        Raises _Stale if the connection was closed before any byte."""
        stream = conn.stream
        parser = ResponseParser()
        received = False
        with trio.move_on_after(within_s):  # not fail_after: see _receive
            while True:
                try:
                    chunk = await stream.receive_some(_RECEIVE)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    if not received:
                        raise _Stale from None
                    raise ConnectionBroken("connection reset mid-head") from None
                if not chunk:
                    if not received:
                        raise _Stale
                    raise ConnectionBroken("connection closed mid-head")
                received = True
                body = parser.feed(chunk if isinstance(chunk, bytes) else bytes(chunk))
                if parser.head is not None:
                    return Response(parser, conn, body, self._read_timeout)
        raise ReadTimedOut(f"no complete response head in {within_s} s")

    async def _connect(self) -> _Connection:
        try:
            with trio.fail_after(self._connect_timeout):
                stream = await trio.open_tcp_stream(self._host, self._port)
                tls = None
                if self._ssl is not None:
                    tls = trio.SSLStream(stream, self._ssl, server_hostname=self._host)
                    try:
                        await tls.do_handshake()
                    except BaseException:  # failed, timed out or cancelled: no socket left open
                        with trio.CancelScope(shield=True):
                            await trio.aclose_forcefully(stream)
                        raise
        except trio.TooSlowError:
            raise ConnectFailed(f"connect timed out after {self._connect_timeout} s") from None
        except (OSError, trio.BrokenResourceError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from None
        self.opened += 1
        return _Connection(stream, tls)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await _close(conn)


async def _send_body(
    stream: trio.abc.Stream, head: bytes, chunks: AsyncIterable[bytes], stall_s: float
) -> bool:
    """Send the head and the chunked body; False when the peer closed or reset the connection
    first, ReadTimedOut when one piece could not be sent for `stall_s`. An exception from
    `chunks` passes through."""
    if not await _sent(stream, head, stall_s):
        return False
    async for chunk in chunks:
        if chunk and not await _sent(stream, format_chunk(chunk), stall_s):
            return False
    return await _sent(stream, format_chunk(b""), stall_s)


async def _sent(stream: trio.abc.Stream, data: bytes, stall_s: float) -> bool:
    try:
        with trio.move_on_after(stall_s) as waited:
            await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        return False
    if waited.cancelled_caught:
        raise ReadTimedOut(f"the upstream read none of the body for {stall_s} s")
    return True


class _Stale(Exception):
    """A kept-alive connection turned out closed before any response byte: retry elsewhere."""


async def _close(conn: _Connection) -> None:
    with trio.CancelScope(shield=True):
        await trio.aclose_forcefully(conn.stream)
