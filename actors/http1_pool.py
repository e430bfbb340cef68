"""A keep-alive HTTP/1.1 connection pool for one upstream origin, on Trio streams.

Measured reason for not using httpx here (docs/decisions.md): httpx's client and transport
layers cost about 1.2 ms of CPU per upstream call on this machine, more than everything else
the gateway does for a request. This pool sends each request in one write; each connection
(actors/http1_connection.py) frames responses with llhttp through protocol/http1_client.py.
Its errors (`ConnectFailed`, `ConnectionBroken`, `ReadTimedOut`: members of the upstream family,
and `Stale`) are actors/errors.py's.

A connection goes back to the pool only when its response was read to its end, asked for
keep-alive and had nothing after it; it is reused only if it has been idle for at most
`keepalive_expiry_s` and nothing (no byte, no EOF, no reset) arrived while it was idle — stray
bytes from an upstream must never reach another request. An idle connection past its expiry is
closed, not tried: a NAT or firewall may have dropped it silently, and a request sent on it
would wait the whole read timeout for an answer that cannot come. A response not read to its
end closes its connection when released: that is how an abandoned stream stops the provider.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar
from urllib.parse import urlsplit

import trio

from actors.errors import ConnectionBroken, Stale
from actors.http1_connection import Connection, Response, connect
from protocol.http1_client import format_request, format_request_head

__all__ = [
    "Http1Pool",
    "Response",
]

DEFAULT_KEEPALIVE_EXPIRY_S = 30.0
T = TypeVar("T")


class Http1Pool:
    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        max_idle: int,
        connect_timeout_s: float,
        read_timeout_s: float,
        keepalive_expiry_s: float = DEFAULT_KEEPALIVE_EXPIRY_S,
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
        self.max_connections = max_connections
        self._max_idle = max_idle
        self._idle: list[Connection] = []
        self._connect_timeout = connect_timeout_s
        self._read_timeout = read_timeout_s
        self._ssl = ssl.create_default_context() if self._tls else None
        self.opened = 0
        self._expiry = keepalive_expiry_s
        self.discarded = 0  # idle connections found closed or not quiet before reuse
        self.expired = 0  # idle connections closed unused, past `keepalive_expiry_s`

    @property
    def in_use(self) -> int:
        """Connections carrying a request now (or being opened for one)."""
        return int(self._limit.borrowed_tokens)

    @property
    def idle(self) -> int:
        """Open connections waiting in the pool for the next request."""
        return len(self._idle)

    def __repr__(self) -> str:
        return (
            f"<Http1Pool {self.authority} idle={len(self._idle)} opened={self.opened}"
            f" discarded={self.discarded} expired={self.expired}>"
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
                    await conn.aclose()

    async def fetch(
        self,
        method: str,
        path: str,
        headers: bytes,
        body: bytes,
        read: Callable[[Response], Awaitable[T]],
    ) -> T:
        """`request` for a caller that reads the whole answer: `read(response)`'s result, with
        the connection released as `request` does. No context manager on this path: a
        JSON call is the hot path, and a generator-based one costs ~1.7 µs each."""
        data = format_request(method, self.base_path + path, self.authority, headers, body)
        # A borrower of its own: a task relaying a stream from this pool may fetch from it too
        # (a guardrail's classifier on the same provider judging the stream it relays).
        borrower = object()
        await self._limit.acquire_on_behalf_of(borrower)
        try:
            conn, response = await self._exchange(data)
            try:
                return await read(response)
            finally:
                if not self._pooled(conn, response):
                    await conn.aclose()
        finally:
            self._limit.release_on_behalf_of(borrower)

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
                response = await conn.send_streamed(head, chunks, self._read_timeout)
            except BaseException:
                await conn.aclose()
                raise
            try:
                yield response
            finally:
                if not self._pooled(conn, response):
                    await conn.aclose()

    def _pooled(self, conn: Connection, response: Response) -> bool:
        """Put `conn` back in the pool if its response was read to its end and allows reuse
        (and the pool has room); False: the caller closes it."""
        if response.reusable and len(self._idle) < self._max_idle:
            conn.idle_since = trio.current_time()
            self._idle.append(conn)
            return True
        return False

    async def _exchange(self, data: bytes) -> tuple[Connection, Response]:
        idle = self._idle
        if idle and idle[0].idle_since < trio.current_time() - self._expiry:
            self._expire()
        while idle:
            conn = idle.pop()
            if not conn.quiet():  # closed by the server, or sent something unasked
                self.discarded += 1
                conn.close()
                continue
            try:  # it may still have been closed just now: then retry elsewhere
                return conn, await self._send(conn, data)
            except Stale:
                await conn.aclose()
            except BaseException:
                await conn.aclose()
                raise
        conn = await self._connect()
        try:
            return conn, await self._send(conn, data)
        except Stale:
            await conn.aclose()
            raise ConnectionBroken("connection closed before the response") from None
        except BaseException:
            await conn.aclose()
            raise

    def _expire(self) -> None:
        """Close the idle connections past their expiry (the oldest first in `_idle`)."""
        idle = self._idle
        oldest = trio.current_time() - self._expiry
        count = 0
        while count < len(idle) and idle[count].idle_since < oldest:
            idle[count].close()
            count += 1
        del idle[:count]
        self.expired += count

    async def _send(self, conn: Connection, data: bytes) -> Response:
        await conn.send(data)
        return await conn.read_head(within_s=self._read_timeout, read_timeout_s=self._read_timeout)

    async def _connect(self) -> Connection:
        conn = await connect(
            self._host, self._port, ssl_context=self._ssl, timeout_s=self._connect_timeout
        )
        self.opened += 1
        return conn

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.aclose()
