"""Upstream provider clients: one connection pool per provider, and the mapping of transport
failures to the `UpstreamError` family (protocol/errors.py, where its hierarchy is drawn):
never leaked as pool or socket exceptions, and always naming the provider.

HTTP/1.1 upstream on purpose: closing an HTTP/1.1 response early closes its connection, which
stops the provider (with h2, httpx sends no RST_STREAM, so a provider would keep generating
after our client left). The pool is our own (actors/http1_pool.py, its connections
actors/http1_connection.py); see docs/decisions.md for the measurement that replaced httpx here.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

import trio

from actors.http1_pool import DEFAULT_KEEPALIVE_EXPIRY_S, Http1Pool, Response
from protocol.errors import (
    UpstreamError,
    UpstreamStatusError,
)
from protocol.http1_client import ResponseHead, format_headers

ANTHROPIC_VERSION = "2023-06-01"
_ERROR_BODY_LIMIT = 64 * 1024


class mapped_errors:  # lower-case: used as `with mapped_errors(provider):`
    """The one place an upstream failure gets its provider: the pool and the parsers raise
    members of the `UpstreamError` family without one (they do not know it). A class rather
    than a generator context manager: it runs several times per upstream call (a few µs less
    each)."""

    __slots__ = ("_provider",)

    def __init__(self, provider: str) -> None:
        self._provider = provider

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if isinstance(exc, UpstreamError):
            exc.named(self._provider)  # in place; it propagates as it is


@dataclass
class ClientStats:
    requests: int = 0
    in_flight: int = 0
    errors: int = 0
    by_status: dict[int, int] = field(default_factory=dict)


class UpstreamClient:
    """Calls one provider. `base_url` is the provider's API root (e.g. …/v1)."""

    def __init__(
        self,
        name: str,
        kind: str,
        base_url: str,
        api_key: str | None,
        *,
        max_connections: int,
        max_keepalive_connections: int,
        connect_timeout_s: float,
        read_timeout_s: float,
        max_response_bytes: int,
        keepalive_expiry_s: float = DEFAULT_KEEPALIVE_EXPIRY_S,
    ) -> None:
        self.name = name
        self.max_response_bytes = max_response_bytes
        self.kind = kind
        self.stats = ClientStats()
        self.pool = Http1Pool(
            base_url,
            max_connections=max_connections,
            max_idle=max_keepalive_connections,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
            keepalive_expiry_s=keepalive_expiry_s,
        )
        self._api_key = api_key
        self._headers: dict[str, bytes] = {}  # by Accept, built on first use

    def __repr__(self) -> str:
        return f"<UpstreamClient {self.name} ({self.kind}) in_flight={self.stats.in_flight}>"

    async def post_json(
        self, path: str, body: bytes, *, api_key: str | None = None, trace: bytes = b""
    ) -> tuple[bytes, ResponseHead]:
        """POST and read the whole answer, with its head (whose `headers` are decoded only
        when read); non-2xx raises UpstreamStatusError, a body over
        `max_response_bytes` UpstreamMalformed. `api_key` replaces the configured key for
        this call (bring-your-own-key); `trace`: header lines sent as well (the call's W3C
        `traceparent`, gateway/telemetry/). Cancellation closes the request's connection."""
        return await self._fetch("POST", path, body, api_key, trace)

    async def get_json(self, path: str, *, api_key: str | None = None) -> bytes:
        """GET and read the whole answer (e.g. `models`, to check a key); non-2xx raises
        UpstreamStatusError. Cancellation closes the request's connection."""
        return (await self._fetch("GET", path, b"", api_key))[0]

    async def delete_json(self, path: str, *, api_key: str | None = None) -> bytes:
        """DELETE and read the whole answer (e.g. `models/{id}`); non-2xx raises
        UpstreamStatusError. Cancellation closes the request's connection."""
        return (await self._fetch("DELETE", path, b"", api_key))[0]

    async def _fetch(
        self, method: str, path: str, body: bytes, api_key: str | None, trace: bytes = b""
    ) -> tuple[bytes, ResponseHead]:
        """The JSON calls' path: `_request` without its context managers (the hot path)."""
        stats = self.stats
        stats.requests += 1
        stats.in_flight += 1
        try:
            with mapped_errors(self.name):
                headers = self._headers_for("application/json", api_key)
                if trace:
                    headers += trace
                return await self.pool.fetch(method, "/" + path, headers, body, self._read_all)
        except UpstreamError:
            stats.errors += 1
            raise
        finally:
            stats.in_flight -= 1

    async def _read_all(self, response: Response) -> tuple[bytes, ResponseHead]:
        await self._check_status(response, self.stats)
        return await response.read(self.max_response_bytes), response.head

    def stream(
        self,
        path: str,
        body: bytes,
        *,
        accept: str = "text/event-stream",
        api_key: str | None = None,
        trace: bytes = b"",
    ) -> AbstractAsyncContextManager[Response]:
        """POST and yield the response once its headers arrived (2xx only); the body is read
        by the caller. Leaving the block closes the response — before its end, that closes
        the connection, which is what stops the provider generating. `api_key` replaces the
        configured key for this call; `trace` as for `post_json`."""
        return self._request("POST", path, body, accept, api_key, trace)

    def post_streamed(
        self,
        path: str,
        chunks: AsyncIterable[bytes],
        *,
        content_type: str,
        accept: str = "application/json",
        api_key: str | None = None,
    ) -> AbstractAsyncContextManager[Response]:
        """As `stream`, with a request body sent as `chunks` yields it (chunked transfer
        coding, e.g. a multipart form relayed as the client sends it): a 24 MB audio file goes
        through without being held. The body cannot be resent, so the call is not retried."""
        return self._request_streamed(path, chunks, content_type, accept, api_key)

    def _headers_for(
        self, accept: str, api_key: str | None, content_type: str = "application/json"
    ) -> bytes:
        if api_key is None and content_type == "application/json":
            headers = self._headers.get(accept)  # the common case: built once per Accept
            if headers is None:
                headers = self._headers[accept] = self._format(accept, self._api_key, content_type)
            return headers
        return self._format(accept, api_key or self._api_key, content_type)

    def _format(self, accept: str, api_key: str | None, content_type: str) -> bytes:
        common = _auth_headers(self.kind, api_key)
        return format_headers({**common, "Content-Type": content_type, "Accept": accept})

    @asynccontextmanager
    async def _request_streamed(
        self,
        path: str,
        chunks: AsyncIterable[bytes],
        content_type: str,
        accept: str,
        api_key: str | None,
    ) -> AsyncIterator[Response]:
        headers = self._headers_for(accept, api_key, content_type)
        async with self._counted() as stats:
            with mapped_errors(self.name):
                async with self.pool.request_streamed(
                    "POST", "/" + path, headers, chunks
                ) as response:
                    await self._check_status(response, stats)
                    yield response

    @asynccontextmanager
    async def _request(
        self,
        method: str,
        path: str,
        body: bytes,
        accept: str,
        api_key: str | None,
        trace: bytes = b"",
    ) -> AsyncIterator[Response]:
        self.stats.requests += 1
        self.stats.in_flight += 1
        try:
            with mapped_errors(self.name):
                headers = self._headers_for(accept, api_key)
                if trace:
                    headers += trace
                async with self.pool.request(method, "/" + path, headers, body) as response:
                    await self._check_status(response, self.stats)
                    yield response
        except UpstreamError:
            self.stats.errors += 1
            raise
        finally:
            self.stats.in_flight -= 1

    @asynccontextmanager
    async def _counted(self) -> AsyncIterator[ClientStats]:
        """The stats of one call (`_request` and `_fetch` inline this)."""
        stats = self.stats
        stats.requests += 1
        stats.in_flight += 1
        try:
            yield stats
        except UpstreamError:
            stats.errors += 1
            raise
        finally:
            stats.in_flight -= 1

    async def _check_status(self, response: Response, stats: ClientStats) -> None:
        """UpstreamStatusError (with the start of its body) for a non-2xx answer."""
        status = response.status
        stats.by_status[status] = stats.by_status.get(status, 0) + 1
        if status >= 300:
            raise UpstreamStatusError(
                self.name,
                status,
                await response.read_prefix(_ERROR_BODY_LIMIT),
                response.headers.get("retry-after"),
            )

    async def aclose(self) -> None:
        await self.pool.aclose()


def _auth_headers(kind: str, api_key: str | None) -> dict[str, str]:
    if kind == "anthropic":
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Upstreams:
    """Every provider's client for the life of the instance (a plain async context manager,
    not an actor: it runs no task). Leaving it closes their connections."""

    def __init__(self, clients: dict[str, UpstreamClient]) -> None:
        self.clients = clients

    def get(self, provider: str) -> UpstreamClient:
        return self.clients[provider]

    def statistics(self) -> dict[str, object]:
        return {
            name: {
                "requests": c.stats.requests,
                "in_flight": c.stats.in_flight,
                "errors": c.stats.errors,
                "connections_in_use": c.pool.in_use,
                "connections_idle": c.pool.idle,
                "max_connections": c.pool.max_connections,
                "connections_opened": c.pool.opened,
                "connections_discarded": c.pool.discarded,  # idle, but closed or not quiet
                "connections_expired": c.pool.expired,  # idle past keepalive_expiry_s
            }
            for name, c in self.clients.items()
        }

    async def __aenter__(self) -> Upstreams:
        return self

    async def __aexit__(self, *exc: object) -> None:
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + 5
            for client in self.clients.values():
                await client.aclose()
