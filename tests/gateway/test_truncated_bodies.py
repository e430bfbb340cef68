"""A request body cut short, over raw loopback sockets: the client declares more than it sends
(or stops a chunked body before its last chunk) and then half-closes its side. It can still
read, so it gets 400 and the connection is closed; a client that is gone (reset) gets nothing
and costs nothing; a body that merely stalls still gets 408. Each case ends with another
client still served."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.gateway.rawhttp import Raw, get
from tests.harness import Gateway, gateway_config, running_gateway

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])  # about HTTP, not storage

BODY_TIMEOUT_S = 0.5


@pytest.fixture(params=["builtin", "hypercorn"])
async def gw(
    request: pytest.FixtureRequest, database_url: str, tmp_path: Path
) -> AsyncIterator[Gateway]:
    config = gateway_config(
        database_url,
        tmp_path,
        toml=f'[server]\nhttp_server = "{request.param}"\n'
        f"request_body_timeout_s = {BODY_TIMEOUT_S}\n",
    )
    async with running_gateway(config) as gateway:
        gateway.http_server = request.param  # type: ignore[attr-defined]
        yield gateway
        await _healthy(gateway)


def _builtin(gw: Gateway) -> bool:
    return str(gw.http_server) == "builtin"  # type: ignore[attr-defined]


async def _healthy(gw: Gateway) -> None:
    raw = await Raw.connect(gw.url)
    await raw.stream.send_all(get("/healthz"))
    with trio.fail_after(5):
        assert (await raw.response())[0] == 200
    await raw.aclose()


def _head(gw: Gateway, path: bytes, framing: bytes, content_type: bytes) -> bytes:
    return (
        b"POST "
        + path
        + b" HTTP/1.1\r\nhost: t\r\nauthorization: Bearer "
        + gw.management_key.encode()
        + b"\r\ncontent-type: "
        + content_type
        + b"\r\n"
        + framing
        + b"\r\n"
    )


_JSON = b'{"name": "truncated"}'
_FORM = (
    b'--AAAA\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'
    b'--AAAA\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nhello'
)
_MULTIPART = b"multipart/form-data; boundary=AAAA"

TRUNCATED = {
    "JSON, half the declared length": (
        b"/v1/keys",
        b"content-length: %d\r\n" % (2 * len(_JSON)),
        b"application/json",
        _JSON,
    ),
    "JSON, nothing of the body": (b"/v1/keys", b"content-length: 20\r\n", b"application/json", b""),
    "JSON, chunked, no last chunk": (
        b"/v1/keys",
        b"transfer-encoding: chunked\r\n",
        b"application/json",
        b"%x\r\n%s\r\n" % (len(_JSON), _JSON),
    ),
    "JSON, chunked, cut inside a chunk": (
        b"/v1/keys",
        b"transfer-encoding: chunked\r\n",
        b"application/json",
        b"%x\r\n%s" % (len(_JSON), _JSON[:5]),
    ),
    "multipart upload, cut inside the file": (
        b"/v1/files",
        b"content-length: 100000\r\n",
        _MULTIPART,
        _FORM,
    ),
    "multipart upload, chunked, cut inside the file": (
        b"/v1/files",
        b"transfer-encoding: chunked\r\n",
        _MULTIPART,
        b"%x\r\n%s\r\n" % (len(_FORM), _FORM),
    ),
}


@pytest.mark.parametrize("case", list(TRUNCATED))
async def test_a_truncated_body_then_half_close_is_400_and_closed(gw: Gateway, case: str) -> None:
    path, framing, content_type, body = TRUNCATED[case]
    raw = await Raw.connect(gw.url)
    await raw.stream.send_all(_head(gw, path, framing, content_type) + body)
    await raw.stream.send_eof()  # the client is done sending, and still reads
    status: int | None = None
    closed = False
    with trio.move_on_after(5):
        status, head, answer = await raw.response()
        closed = await raw.closed()
    await raw.aclose()
    assert (status, closed) == (400, True), (case, status)
    if _builtin(gw):
        error = json.loads(answer)["error"]
        assert error["type"] == "invalid_request_error" and "ended" in error["message"]
        assert b"connection: close" in head.lower()
    else:
        assert answer == b""  # expected different: h11's 400 has no body
    r = await gw.client.get("/v1/keys", headers=gw.auth())
    assert "truncated" not in r.text
    r = await gw.client.get("/v1/files", headers=gw.auth())
    assert r.json()["data"] == []


async def test_a_client_that_resets_mid_body_gets_nothing_and_costs_nothing(gw: Gateway) -> None:
    path, framing, content_type, body = TRUNCATED["multipart upload, cut inside the file"]
    raw = await Raw.connect(gw.url)
    await raw.stream.send_all(_head(gw, path, framing + b"expect: 100-continue\r\n", content_type))
    with trio.fail_after(5):  # 100 Continue: the route is reading the body now
        while b"\r\n\r\n" not in raw.buffer:
            raw.buffer += await raw.stream.receive_some()
    assert raw.buffer.startswith(b"HTTP/1.1 100 ")
    await raw.stream.send_all(body)
    sock = raw.stream.socket
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await raw.aclose()  # RST: gone, not half-closed
    for _ in range(3):
        await _healthy(gw)
    r = await gw.client.get("/v1/files", headers=gw.auth())
    assert r.json()["data"] == []


@pytest.mark.parametrize("framing", [b"content-length: 100\r\n", b"transfer-encoding: chunked\r\n"])
async def test_a_body_that_stalls_still_gets_408(gw: Gateway, framing: bytes) -> None:
    first = _JSON if framing.startswith(b"content") else b"%x\r\n%s\r\n" % (len(_JSON), _JSON)
    raw = await Raw.connect(gw.url)
    await raw.stream.send_all(_head(gw, b"/v1/keys", framing, b"application/json") + first)
    got: tuple[int | None, bool] | None = None
    with trio.move_on_after(2):
        status = (await raw.response())[0]
        got = (status, await raw.closed())
    await raw.aclose()
    if _builtin(gw):
        assert got == (408, True)
    else:
        assert got is None  # expected different: Hypercorn has no body timeout
