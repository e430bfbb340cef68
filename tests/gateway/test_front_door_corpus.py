"""The adversarial corpus: raw requests over real loopback sockets against a served gateway,
on the built-in server and on Hypercorn. Each case names the status expected (None: closed
without an answer) and whether the connection is closed after it; after every case a fresh
client must still get 200 from /healthz. Where Hypercorn (h11) answers differently, the case is
listed in HYPERCORN_DIFFERS with what it does instead (docs/operations.md explains the
consequence)."""

from __future__ import annotations

import os
import resource
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from tests.gateway.rawhttp import Raw, get
from tests.harness import Gateway, gateway_config, running_gateway

HANG = "no answer in 2 s"
KEY = b"{KEY}"  # replaced by the instance's management key
HEAD_LIMIT = 8192


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    status: int | None
    closes: bool


def _post(headers: bytes, body: bytes = b"", path: bytes = b"/v1/keys") -> bytes:
    return (
        b"POST "
        + path
        + b" HTTP/1.1\r\nhost: t\r\nauthorization: Bearer "
        + KEY
        + b"\r\n"
        + (b"content-type: application/json\r\n" + headers + b"\r\n" + body)
    )


def _header(line: bytes) -> bytes:
    return b"GET /healthz HTTP/1.1\r\nhost: t\r\n" + line + b"\r\n\r\n"


_JSON = b'{"name":"corpus"}'
_CHUNKED_JSON = b"11\r\n" + _JSON + b"\r\n0\r\n\r\n"
TE = b"transfer-encoding: "

CASES = [
    # Request smuggling shapes: framing disagreements are refused, never guessed.
    Case("CL.TE", _post(b"content-length: 4\r\n" + TE + b"chunked\r\n", b"0\r\n\r\n"), 400, True),
    Case("TE.CL", _post(TE + b"chunked\r\ncontent-length: 40\r\n", _CHUNKED_JSON), 400, True),
    Case("TE xchunked", _post(TE + b"xchunked\r\n", _CHUNKED_JSON), 400, True),
    Case("TE chunked, identity", _post(TE + b"chunked, identity\r\n", _CHUNKED_JSON), 400, True),
    Case("TE gzip, chunked", _post(TE + b"gzip, chunked\r\n", _CHUNKED_JSON), 400, True),
    Case("TE identity", _post(TE + b"identity\r\n", _JSON), 400, True),
    Case("TE twice", _post(TE + b"chunked\r\n" + TE + b"chunked\r\n", _CHUNKED_JSON), 400, True),
    Case("TE obs-fold", _post(b"transfer-encoding:\r\n chunked\r\n", _CHUNKED_JSON), 400, True),
    Case("TE space before colon", _post(b"transfer-encoding : chunked\r\n", b""), 400, True),
    Case(
        "TE in HTTP/1.0",
        b"POST /v1/keys HTTP/1.0\r\n" + TE + b"chunked\r\n\r\n" + _CHUNKED_JSON,
        400,
        True,
    ),
    Case("TE  chunked (OWS, legal)", _post(TE + b"  chunked\r\n", _CHUNKED_JSON), 200, False),
    Case("TE CHUNKED (case, legal)", _post(TE + b"CHUNKED\r\n", _CHUNKED_JSON), 200, False),
    Case("CL x", _post(b"content-length: x\r\n"), 400, True),
    Case("CL 0x0", _post(b"content-length: 0x0\r\n"), 400, True),
    Case("CL 0, 54", _post(b"content-length: 0, 54\r\n"), 400, True),
    Case("CL -1", _post(b"content-length: -1\r\n"), 400, True),
    Case("CL +5", _post(b"content-length: +5\r\n", b"hello"), 400, True),
    Case("CL 1_0", _post(b"content-length: 1_0\r\n", b"0123456789"), 400, True),
    Case("CL huge", _post(b"content-length: 99999999999999999999999\r\n"), 400, True),
    Case("CL conflicting", _post(b"content-length: 17\r\ncontent-length: 5\r\n", _JSON), 400, True),
    Case(
        "CL duplicate equal",
        _post(b"content-length: 17\r\ncontent-length: 17\r\n", _JSON),
        400,
        True,
    ),
    Case(
        "chunk size 0x10",
        _post(TE + b"chunked\r\n", b"0x11\r\n" + _JSON + b"\r\n0\r\n\r\n"),
        400,
        True,
    ),
    Case("chunk size -1", _post(TE + b"chunked\r\n", b"-1\r\n\r\n"), 400, True),
    Case("chunk size huge", _post(TE + b"chunked\r\n", b"f" * 20 + b"\r\n"), 400, True),
    Case(
        "chunk size garbage",
        _post(TE + b"chunked\r\n", b"11zz\r\n" + _JSON + b"\r\n0\r\n\r\n"),
        400,
        True,
    ),
    Case("chunk without CRLF", _post(TE + b"chunked\r\n", b"3\r\nabcXX0\r\n\r\n"), 400, True),
    Case(
        "chunk extension (legal)",
        _post(TE + b"chunked\r\n", b"11;a=b\r\n" + _JSON + b"\r\n0\r\n\r\n"),
        200,
        False,
    ),
    # Header syntax.
    Case("bare CR", b"GET /healthz HTTP/1.1\r\nhost: t\rx: y\r\n\r\n", 400, True),
    Case("bare LF everywhere", b"GET /healthz HTTP/1.1\nhost: t\n\n", 400, True),
    Case("bare LF in one header", b"GET /healthz HTTP/1.1\r\nhost: t\nx: y\r\n\r\n", 400, True),
    Case("NUL in header value", _header(b"x: a\x00b"), 400, True),
    Case("NUL in header name", _header(b"x\x00y: ab"), 400, True),
    Case("space before colon", _header(b"x : y"), 400, True),
    Case("bad header name chars", _header(b"x(y): z"), 400, True),
    Case("empty header name", _header(b": z"), 400, True),
    Case("obs-fold", _header(b"x: a\r\n b"), 400, True),
    Case("CTL in header value", _header(b"x: a\x01b"), 400, True),
    Case("header line without colon", _header(b"bad header line"), 400, True),
    # The request line.
    Case("HTTP/2.0", b"GET /healthz HTTP/2.0\r\nhost: t\r\n\r\n", 505, True),
    Case("HTTP/1.2", b"GET /healthz HTTP/1.2\r\nhost: t\r\n\r\n", 400, True),
    Case("HTTP/0.9", b"GET /healthz\r\n\r\n", 400, True),
    Case("lower-case version", b"GET /healthz http/1.1\r\nhost: t\r\n\r\n", 400, True),
    Case("bad method", b"G@T /healthz HTTP/1.1\r\nhost: t\r\n\r\n", 400, True),
    Case("space in target", b"GET /heal thz HTTP/1.1\r\nhost: t\r\n\r\n", 400, True),
    Case("CTL in target", b"GET /heal\x01thz HTTP/1.1\r\nhost: t\r\n\r\n", 400, True),
    Case("not HTTP", b"NOT HTTP AT ALL\r\n\r\n", 400, True),
    Case("missing Host", b"GET /healthz HTTP/1.1\r\n\r\n", 400, True),
    Case("two Hosts", b"GET /healthz HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n", 400, True),
    Case("absolute-form", b"GET http://t/healthz HTTP/1.1\r\nhost: t\r\n\r\n", 200, False),
    Case("leading empty line", b"\r\n" + get("/healthz"), 200, False),
    Case("HTTP/1.0 without Host", b"GET /healthz HTTP/1.0\r\n\r\n", 200, True),
    # Sizes (the corpus gateway's max_head_bytes is HEAD_LIMIT).
    Case(
        "long request line",
        b"GET /" + b"a" * HEAD_LIMIT + b" HTTP/1.1\r\nhost: t\r\n\r\n",
        431,
        True,
    ),
    Case("large header", _header(b"x: " + b"a" * HEAD_LIMIT), 431, True),
    Case("too many headers", _header(b"\r\n".join(b"x%d: y" % i for i in range(101))), 431, True),
    # Connections that say nothing.
    Case("open and close", b"", None, True),
]

# What Hypercorn (h11) does instead, where it differs: (status, closes).
HYPERCORN_DIFFERS: dict[str, tuple[int | str | None, bool]] = {
    # Both framings accepted, Transfer-Encoding wins, the connection stays open (RFC 9112 6.1
    # says close it): a front proxy that used Content-Length would desynchronise.
    "CL.TE": (400, False),
    "TE.CL": (200, False),
    # 501 rather than 400 (h11 knows only chunked); closed either way.
    "TE xchunked": (501, True),
    "TE chunked, identity": (501, True),
    "TE gzip, chunked": (501, True),
    "TE identity": (501, True),
    "TE twice": (501, True),
    "TE obs-fold": (200, False),  # obs-fold unfolded and accepted
    "TE in HTTP/1.0": (401, True),  # read as chunked, answered
    "CL duplicate equal": (200, False),  # allowed by RFC 9110 8.6; we refuse all duplicates
    "chunk size huge": (HANG, False),  # waits for 2^80 bytes (until the client gives up)
    "bare LF everywhere": (200, False),
    "bare LF in one header": (200, False),
    "obs-fold": (200, False),
    "CTL in header value": (200, False),
    "HTTP/2.0": (200, False),  # answered as HTTP/1.1
    "HTTP/1.2": (200, False),
    "leading empty line": (400, True),  # RFC 9112 2.2: SHOULD ignore at least one
    # The absolute URI is passed on as the ASGI path (ASGI wants the path alone): unknown route.
    "absolute-form": (404, False),
    # h11 applies its limit (max_head_bytes here) only to a head still incomplete: a long
    # head that arrives whole is served.
    "long request line": (404, False),
    "large header": (200, False),
    "too many headers": (200, False),  # no header count limit
}


def _config(http_server: str) -> str:
    return (
        f'[server]\nhttp_server = "{http_server}"\nmax_head_bytes = {HEAD_LIMIT}\n'
        "request_head_timeout_s = 0.5\nrequest_body_timeout_s = 0.5\n"
    )


async def _healthy(gw: Gateway) -> None:
    raw = await Raw.connect(gw.url)
    await raw.stream.send_all(get("/healthz"))
    status, _, body = await raw.response()
    assert status == 200, body
    await raw.aclose()


async def _run(gw: Gateway, case: Case, *, error_shape: bool) -> tuple[int | str | None, bool]:
    raw = await Raw.connect(gw.url)
    if not case.data:
        await raw.aclose()
        return None, True
    try:
        data = case.data.replace(KEY, gw.management_key.encode())
        # A fresh key name of the same length each time (names are unique per organization).
        await raw.stream.send_all(data.replace(b"corpus", os.urandom(3).hex().encode()))
        with trio.move_on_after(2) as waiting:
            status, _, body = await raw.response()
        if waiting.cancelled_caught:
            return HANG, False
        if error_shape and status is not None and status >= 400:
            assert b'"error"' in body, (case.name, body)
        await raw.stream.send_all(get("/healthz"))
        with trio.fail_after(2):
            closed = (await raw.response())[0] is None
        return status, closed
    except trio.BrokenResourceError:
        return None, True
    finally:
        await raw.aclose()


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("http_server", ["builtin", "hypercorn"])
async def test_corpus(database_url: str, tmp_path: Path, http_server: str) -> None:
    config = gateway_config(database_url, tmp_path, toml=_config(http_server))
    expected_different = HYPERCORN_DIFFERS if http_server == "hypercorn" else {}
    wrong = []
    async with running_gateway(config) as gw:
        for case in CASES:
            expected = expected_different.get(case.name, (case.status, case.closes))
            got = await _run(gw, case, error_shape=http_server == "builtin")
            if got != expected:
                wrong.append(f"{case.name!r}: {got},")
            await _healthy(gw)
    assert not wrong, "\n".join(wrong)


# --- cases that need more than one write, or a check afterwards -------------------------------


@pytest.fixture(params=["builtin", "hypercorn"])
async def front(
    request: pytest.FixtureRequest, database_url: str, tmp_path: Path
) -> AsyncIterator[Gateway]:
    config = gateway_config(database_url, tmp_path, toml=_config(request.param))
    async with running_gateway(config) as gw:
        gw.http_server = request.param  # type: ignore[attr-defined]
        yield gw
        await _healthy(gw)  # every case ends with another client still served


def _server(gw: Gateway) -> str:
    return str(gw.http_server)  # type: ignore[attr-defined]


async def _key_names(gw: Gateway) -> list[str]:
    response = await gw.client.get("/v1/keys", headers=gw.auth())
    assert response.status_code == 200
    return [key["name"] for key in response.json()["data"]]


def _hidden_create(gw: Gateway, name: bytes) -> bytes:
    body = b'{"name":"%s"}' % name
    return (
        b"POST /v1/keys HTTP/1.1\r\nhost: t\r\nauthorization: Bearer "
        + gw.management_key.encode()
        + b"\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_request_inside_a_body_is_never_run(front: Gateway) -> None:
    hidden = _hidden_create(front, b"smuggled-in-body")
    raw = await Raw.connect(front.url)
    await raw.stream.send_all(
        b"POST /v1/nope HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n%s%s"
        % (len(hidden), hidden, get("/healthz"))
    )
    with trio.fail_after(5):
        assert (await raw.response())[0] == 404
        assert (await raw.response())[0] == 200  # the next real request, in order
    await raw.aclose()
    assert "smuggled-in-body" not in await _key_names(front)


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_cl_te_cannot_smuggle_a_request(front: Gateway) -> None:
    hidden = _hidden_create(front, b"smuggled-cl-te")
    body = b"0\r\n\r\n" + hidden
    raw = await Raw.connect(front.url)
    await raw.stream.send_all(
        b"POST /v1/nope HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n"
        b"transfer-encoding: chunked\r\n\r\n%s" % (len(body), body)
    )
    with trio.fail_after(5):
        status = (await raw.response())[0]
        second = (await raw.response())[0]
    await raw.aclose()
    names = await _key_names(front)
    if _server(front) == "builtin":
        assert (status, second) == (400, None)
        assert "smuggled-cl-te" not in names
    else:
        # Expected different: h11 frames by Transfer-Encoding and keeps the connection, so
        # what a Content-Length proxy sent as one request's body runs as a second request.
        assert (status, second) == (404, 200)
        assert "smuggled-cl-te" in names


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_three_pipelined_requests_in_one_packet(front: Gateway) -> None:
    raw = await Raw.connect(front.url)
    await raw.stream.send_all(get("/healthz") + get("/v1/nope") + get("/healthz"))
    with trio.fail_after(5):
        assert [(await raw.response())[0] for _ in range(3)] == [200, 404, 200]
    await raw.aclose()


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_slowloris_head_is_dropped(front: Gateway) -> None:
    raw = await Raw.connect(front.url)
    await raw.stream.send_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n")
    started = trio.current_time()
    answer: list[int | None] = []

    async def drip(cancel: trio.CancelScope) -> None:
        for i in range(30):
            try:
                await raw.stream.send_all(b"x-%d: y\r\n" % i)
            except trio.BrokenResourceError:
                break
            await trio.sleep(0.1)
        cancel.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drip, nursery.cancel_scope)
        answer.append((await raw.response())[0])
        nursery.cancel_scope.cancel()
    await raw.aclose()
    if _server(front) == "builtin":
        assert answer == [408]
        assert trio.current_time() - started < 2  # request_head_timeout_s = 0.5
    else:
        assert answer == []  # expected different: Hypercorn has no head timeout


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_slow_body_is_dropped(front: Gateway) -> None:
    raw = await Raw.connect(front.url)
    await raw.stream.send_all(
        _hidden_create(front, b"slow-body")[:-5]  # the body's last bytes never come
    )
    got: tuple[int | None, bool] | None = None
    with trio.move_on_after(2):
        status = (await raw.response())[0]
        got = (status, await raw.closed())
    await raw.aclose()
    if _server(front) == "builtin":
        assert got == (408, True)  # request_body_timeout_s = 0.5
    else:
        assert got is None  # expected different: Hypercorn has no body timeout


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_silent_new_connection_is_closed_after_the_head_timeout(front: Gateway) -> None:
    raw = await Raw.connect(front.url)
    closed: bool | None = None
    with trio.move_on_after(2):
        closed = await raw.closed()
    await raw.aclose()
    if _server(front) == "builtin":
        assert closed  # request_head_timeout_s = 0.5, not the keep-alive timeout
    else:
        assert closed is None  # expected different: keep_alive_timeout_s (75 s) applies


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize("http_server", ["builtin", "hypercorn"])
async def test_two_thousand_idle_connections_do_not_block_others(
    database_url: str, tmp_path: Path, http_server: str
) -> None:
    # Default timeouts: the idle connections must still be open while the other client asks.
    config = gateway_config(
        database_url, tmp_path, toml=f'[server]\nhttp_server = "{http_server}"\n'
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    idle: list[trio.socket.SocketType] = []
    try:
        async with running_gateway(config) as gw:
            host, port = gw.url.removeprefix("http://").split(":")
            for _ in range(2000):
                sock = trio.socket.socket()
                idle.append(sock)
                await sock.connect((host, int(port)))
            await _healthy(gw)  # served meanwhile (after the server took the backlog)
            started = trio.current_time()
            await _healthy(gw)
            assert trio.current_time() - started < 1  # and promptly
            for sock in idle:
                sock.close()
    finally:
        for sock in idle:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
