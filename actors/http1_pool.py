"""A keep-alive HTTP/1.1 connection pool for one upstream origin, on Trio streams.

Measured reason for not using httpx here (docs/decisions.md): httpx's client and transport
layers cost about 1.2 ms of CPU per upstream call on this machine, more than everything else
the gateway does for a request. This pool sends each request in one write and parses only the
framing (protocol/http1.py).

Errors (mapped to the Upstream* errors by actors/upstream.py):

    PoolError
     ├── ConnectFailed     the TCP/TLS connection could not be opened in time
     ├── ConnectionBroken  the peer closed or reset, or broke HTTP/1.1 framing
     └── ReadTimedOut      no bytes for `read_timeout_s`

A response whose body was not read to its end when released closes its connection — that is
how an abandoned stream stops the provider.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import trio

from protocol.http1 import BodyReader, HTTPProtocolError, ResponseHead, format_request, parse_head

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
    __slots__ = ("stream", "leftover")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.leftover = b""


class Response:
    """A response whose head has arrived; the body is read with `read` or `iter_raw`."""

    def __init__(self, head: ResponseHead, conn: _Connection, first: bytes, read_timeout: float):
        self.status = head.status
        self.headers = head.headers
        self._head = head
        self._conn = conn
        self._reader = BodyReader(head)
        self._pending = self._reader.feed(first) if first else b""
        self._read_timeout = read_timeout

    @property
    def complete(self) -> bool:
        return self._reader.done and not self._pending

    @property
    def reusable(self) -> bool:
        reader = self._reader
        return reader.done and reader.reusable and not reader.excess and self._head.keep_alive

    async def next_chunk(self) -> bytes:
        """The next body bytes as they arrive (chunked framing removed); b"" at the end.
        Cancellation leaves the connection unusable; the pool then closes it. (A method, not
        an async generator, so that abandoning a body leaves nothing to finalize.)"""
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        while not self._reader.done:
            data = await self._receive()
            try:
                if not data:
                    self._reader.eof()
                    return b""
                body = self._reader.feed(data)
            except HTTPProtocolError as exc:
                raise ConnectionBroken(str(exc)) from None
            if body:
                return body
        return b""

    async def read(self, limit: int | None = None) -> bytes:
        """The rest of the body (at most about `limit` bytes, when given)."""
        parts: list[bytes] = []
        size = 0
        while chunk := await self.next_chunk():
            parts.append(chunk)
            size += len(chunk)
            if limit is not None and size >= limit:
                break
        return b"".join(parts)

    async def _receive(self) -> bytes:
        try:
            with trio.fail_after(self._read_timeout):
                data = await self._conn.stream.receive_some(_RECEIVE)
            return data if isinstance(data, bytes) else bytes(data)
        except trio.TooSlowError:
            raise ReadTimedOut(f"no data for {self._read_timeout} s") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionBroken(type(exc).__name__) from None


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

    def __repr__(self) -> str:
        return f"<Http1Pool {self.authority} idle={len(self._idle)} opened={self.opened}>"

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
                if response.reusable and len(self._idle) < self._max_idle:
                    self._idle.append(conn)
                else:
                    await _close(conn)

    async def _exchange(self, data: bytes) -> tuple[_Connection, Response]:
        while self._idle:  # a reused connection may have been closed by the server meanwhile
            conn = self._idle.pop()
            try:
                return conn, await self._send(conn, data)
            except _Stale:
                await _close(conn)
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
        try:
            await conn.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            raise _Stale from None
        buffer = b""
        while True:
            try:
                with trio.fail_after(self._read_timeout):
                    chunk = await conn.stream.receive_some(_RECEIVE)
            except trio.TooSlowError:
                await _close(conn)
                raise ReadTimedOut(f"no response for {self._read_timeout} s") from None
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                if not buffer:
                    raise _Stale from None
                await _close(conn)
                raise ConnectionBroken("connection reset") from None
            if not chunk:
                if not buffer:
                    raise _Stale
                await _close(conn)
                raise ConnectionBroken("connection closed mid-head")
            buffer += chunk
            try:
                parsed = parse_head(buffer)
            except HTTPProtocolError as exc:
                await _close(conn)
                raise ConnectionBroken(str(exc)) from None
            if parsed is not None:
                head, offset = parsed
                return Response(head, conn, buffer[offset:], self._read_timeout)

    async def _connect(self) -> _Connection:
        try:
            with trio.fail_after(self._connect_timeout):
                stream: trio.abc.Stream = await trio.open_tcp_stream(self._host, self._port)
                if self._ssl is not None:
                    tls = trio.SSLStream(stream, self._ssl, server_hostname=self._host)
                    await tls.do_handshake()
                    stream = tls
        except trio.TooSlowError:
            raise ConnectFailed(f"connect timed out after {self._connect_timeout} s") from None
        except (OSError, trio.BrokenResourceError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from None
        self.opened += 1
        return _Connection(stream)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await _close(conn)


class _Stale(Exception):
    """A kept-alive connection turned out closed before any response byte: retry elsewhere."""


async def _close(conn: _Connection) -> None:
    with trio.CancelScope(shield=True):
        await trio.aclose_forcefully(conn.stream)
