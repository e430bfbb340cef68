"""The built-in HTTP/1.1 server on raw sockets: framing, keep-alive, bad input, and the
Hypercorn alternative still serving the same app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.harness import Gateway, gateway_config, running_gateway

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])  # about HTTP, not storage


class Raw:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def response(self) -> tuple[bytes, bytes]:
        """One response: (head, body), Content-Length framed."""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in self.buffer:
                chunk = await self.stream.receive_some()
                assert chunk, self.buffer
                self.buffer += chunk
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            while len(rest) < length:
                rest += await self.stream.receive_some()
            self.buffer = rest[length:]
            return head, rest[:length]

    async def closed(self) -> bool:
        with trio.fail_after(10):
            return await self.stream.receive_some() == b""


@pytest.fixture
async def raw(gateway: Gateway) -> AsyncIterator[Raw]:
    host, port = gateway.url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    yield Raw(stream)
    await stream.aclose()


def _get(path: str, extra: bytes = b"") -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nhost: t\r\n" + extra + b"\r\n"


@sqlite_only
async def test_keep_alive_and_pipelined_requests(raw: Raw) -> None:
    await raw.stream.send_all(_get("/healthz") + _get("/v1/nope") + _get("/healthz"))
    statuses = []
    for _ in range(3):
        head, _ = await raw.response()
        statuses.append(head.split(b" ")[1])
        assert b"\r\ndate: " in head.lower()
    assert statuses == [b"200", b"404", b"200"]


@sqlite_only
async def test_unread_body_then_next_request_in_the_same_packet(raw: Raw, gateway: Gateway) -> None:
    body = b'{"name": "x"}'
    first = (
        b"POST /v1/keys HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )  # no credential: answered 401 before the body is read
    await raw.stream.send_all(first + _get("/healthz"))
    head, _ = await raw.response()
    assert head.startswith(b"HTTP/1.1 401")
    head, _ = await raw.response()
    assert head.startswith(b"HTTP/1.1 200")


@sqlite_only
async def test_expect_100_continue(raw: Raw, gateway: Gateway) -> None:
    body = b'{"name": "continued"}'
    await raw.stream.send_all(
        b"POST /v1/keys HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        b"authorization: Bearer %s\r\nexpect: 100-continue\r\ncontent-length: %d\r\n\r\n"
        % (gateway.management_key.encode(), len(body))
    )
    with trio.fail_after(10):
        while b"\r\n\r\n" not in raw.buffer:
            raw.buffer += await raw.stream.receive_some()
    assert raw.buffer.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    raw.buffer = raw.buffer[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
    await raw.stream.send_all(body)
    head, answer = await raw.response()
    assert head.startswith(b"HTTP/1.1 200") and b"continued" in answer


@sqlite_only
@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nbad header line\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nx: " + b"a" * 70_000 + b"\r\n\r\n", b"431"),
        # Once took the whole process down (HTTPProtocolError out of the handler) or spun the
        # event loop forever (-1); and a substring test took xchunked for chunked.
        (b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: x\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 0, 54\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: -1\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nhost: t\r\ntransfer-encoding: xchunked\r\n\r\n0\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n", b"400"),
    ],
)
async def test_malformed_requests_get_an_error_and_close(
    raw: Raw, request_bytes: bytes, status: bytes
) -> None:
    await raw.stream.send_all(request_bytes)
    head, body = await raw.response()
    assert head.split(b" ")[1] == status
    assert b'"error"' in body
    assert await raw.closed()


@sqlite_only
async def test_head_request_has_no_body(raw: Raw) -> None:
    await raw.stream.send_all(b"HEAD /healthz HTTP/1.1\r\nhost: t\r\n\r\n" + _get("/healthz"))
    with trio.fail_after(10):
        while raw.buffer.count(b"HTTP/1.1 ") < 2 or not raw.buffer.endswith(b"}"):
            raw.buffer += await raw.stream.receive_some()
    first, second = raw.buffer.split(b"HTTP/1.1 ")[1:]
    assert first.endswith(b"\r\n\r\n")  # HEAD: headers only
    assert second.startswith(b"200") and second.endswith(b'{"status":"ok"}')


@sqlite_only
async def test_http_1_0_without_keep_alive_is_closed(raw: Raw) -> None:
    await raw.stream.send_all(b"GET /healthz HTTP/1.0\r\n\r\n")
    head, _ = await raw.response()
    assert head.startswith(b"HTTP/1.1 200") and b"connection: close" in head.lower()
    assert await raw.closed()


@sqlite_only
async def test_idle_connection_closed_after_keep_alive_timeout(
    database_url: str, tmp_path: Path
) -> None:
    config = gateway_config(database_url, tmp_path, toml="[server]\nkeep_alive_timeout_s = 0.2\n")
    async with running_gateway(config) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        raw = Raw(await trio.open_tcp_stream(host, int(port)))
        await raw.stream.send_all(_get("/healthz"))
        await raw.response()
        assert await raw.closed()  # nothing more was sent: closed after 0.2 s
        await raw.stream.aclose()


@sqlite_only
async def test_hypercorn_still_serves_the_same_app(database_url: str, tmp_path: Path) -> None:
    config = gateway_config(database_url, tmp_path, toml='[server]\nhttp_server = "hypercorn"\n')
    async with running_gateway(config) as gw:
        assert (await gw.client.get("/healthz")).status_code == 200
        r = await gw.client.post("/v1/keys", json={"name": "h"}, headers=gw.auth())
        assert r.status_code == 200 and r.headers["x-request-id"].startswith("req_")
        async with httpx.AsyncClient(base_url=gw.url, http1=True) as client:
            assert (await client.get("/v1/nope")).status_code == 404


@sqlite_only
async def test_websocket_upgrade_without_a_websocket_route(raw: Raw) -> None:
    await raw.stream.send_all(
        _get(
            "/v1/nope",
            b"upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\n"
            b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
        )
    )
    head, _ = await raw.response()
    assert head.startswith(b"HTTP/1.1 403") or head.startswith(b"HTTP/1.1 404"), head
    assert await raw.closed()
