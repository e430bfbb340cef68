"""Upstream provider clients: one pooled httpx client per provider, and the mapping of
transport failures to our own errors (never leaked as httpx exceptions).

    UpstreamError
     ├── UpstreamStatusError    the provider answered with a non-2xx status
     ├── UpstreamUnavailable    could not connect, or the connection broke
     └── UpstreamTimeout        no answer (or no next chunk) within the read timeout

HTTP/1.1 upstream on purpose: httpx sends no RST_STREAM when an h2 stream is closed early, so a
provider would keep generating after our client left; closing an HTTP/1.1 response early
closes its connection, which stops the provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

import httpx
import trio

from actors.base import Actor

ANTHROPIC_VERSION = "2023-06-01"
_ERROR_BODY_LIMIT = 64 * 1024


class UpstreamError(Exception):
    def __init__(self, provider: str, message: str) -> None:
        super().__init__(f"{provider}: {message}")
        self.provider = provider


class UpstreamStatusError(UpstreamError):
    def __init__(self, provider: str, status: int, body: bytes, retry_after: str | None) -> None:
        super().__init__(provider, f"upstream answered {status}")
        self.status = status
        self.body = body
        self.retry_after = retry_after


class UpstreamUnavailable(UpstreamError):
    pass


class UpstreamTimeout(UpstreamError):
    pass


@contextmanager
def mapped_errors(provider: str) -> Iterator[None]:
    """The one place httpx's exceptions become ours."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(provider, type(exc).__name__) from exc
    except httpx.TransportError as exc:
        raise UpstreamUnavailable(provider, type(exc).__name__) from exc


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
    ) -> None:
        self.name = name
        self.kind = kind
        self.stats = ClientStats()
        self._client = httpx.AsyncClient(
            base_url=base_url + "/",
            headers=_auth_headers(kind, api_key),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_keepalive_connections,
            ),
            timeout=httpx.Timeout(
                connect=connect_timeout_s,
                read=read_timeout_s,
                write=read_timeout_s,
                pool=connect_timeout_s,
            ),
            http1=True,
            http2=False,
            follow_redirects=False,
            trust_env=False,
        )

    def __repr__(self) -> str:
        return f"<UpstreamClient {self.name} ({self.kind}) in_flight={self.stats.in_flight}>"

    async def post_json(self, path: str, body: bytes) -> tuple[bytes, httpx.Headers]:
        """POST and read the whole answer; non-2xx raises UpstreamStatusError.
        Cancellation closes the request's connection."""
        async with self.stream(path, body, accept="application/json") as response:
            with mapped_errors(self.name):
                content = await response.aread()
            return content, response.headers

    @asynccontextmanager
    async def stream(
        self, path: str, body: bytes, *, accept: str = "text/event-stream"
    ) -> AsyncIterator[httpx.Response]:
        """POST and yield the response once its headers arrived (2xx only); the body is read
        by the caller. Leaving the block closes the response — before its end, that closes
        the connection, which is what stops the provider generating."""
        self.stats.requests += 1
        self.stats.in_flight += 1
        try:
            request = self._client.build_request(
                "POST",
                path,
                content=body,
                headers={"content-type": "application/json", "accept": accept},
            )
            with mapped_errors(self.name):
                response = await self._client.send(request, stream=True)
            try:
                status = response.status_code
                self.stats.by_status[status] = self.stats.by_status.get(status, 0) + 1
                if status >= 300:
                    with mapped_errors(self.name):
                        error_body = await _read_limited(response)
                    raise UpstreamStatusError(
                        self.name, status, error_body, response.headers.get("retry-after")
                    )
                yield response
            finally:
                with trio.CancelScope(shield=True):
                    await response.aclose()
        except UpstreamError:
            self.stats.errors += 1
            raise
        finally:
            self.stats.in_flight -= 1

    async def aclose(self) -> None:
        await self._client.aclose()


async def _read_limited(response: httpx.Response) -> bytes:
    data = bytearray()
    async for chunk in response.aiter_raw():
        data += chunk
        if len(data) >= _ERROR_BODY_LIMIT:
            break
    return bytes(data[:_ERROR_BODY_LIMIT])


def _auth_headers(kind: str, api_key: str | None) -> dict[str, str]:
    if kind == "anthropic":
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


class Upstreams(Actor):
    """Owns every provider's client for the life of the instance; shows their numbers in the
    actor tree. Clients are created before `started()` and closed when stopped."""

    def __init__(self, clients: dict[str, UpstreamClient]) -> None:
        self.name = "upstreams"
        self.clients = clients

    def get(self, provider: str) -> UpstreamClient:
        return self.clients[provider]

    def statistics(self) -> dict[str, object]:
        return {
            name: {
                "requests": c.stats.requests,
                "in_flight": c.stats.in_flight,
                "errors": c.stats.errors,
            }
            for name, c in self.clients.items()
        }

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + 5
                for client in self.clients.values():
                    await client.aclose()
