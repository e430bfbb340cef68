"""The built-in server with bare ASGI apps of the tests' own, over real loopback sockets: one
connection's failure ends that connection only; a client that keeps sending while its response
streams is not read past a small buffer, and leaving is still noticed; the connection limit."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from msgspec.structs import replace

from gateway.config.schema import ServerConfig
from gateway.errors import ClientDisconnected
from gateway.server import http1
from gateway.server.asgi import Message
from gateway.server.http1 import Http1Server
from protocol.http1_server import Request
from tests.gateway.rawhttp import Raw, get

Receive = Any
Send = Any


@asynccontextmanager
async def serving(app: Any, **settings: Any) -> AsyncIterator[str]:
    async with serving_with(app, **settings) as (url, _):
        yield url


@asynccontextmanager
async def serving_with(app: Any, **settings: Any) -> AsyncIterator[tuple[str, Http1Server]]:
    config = replace(ServerConfig(), graceful_timeout_s=0.5, **settings)
    server = Http1Server(app, config)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(server.serve, listeners, stop.wait)
        yield urls[0], server
        stop.set()


async def _start(send: Send, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status, "headers": []})


async def failing_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        raise RuntimeError("no lifespan here")
    path = scope["path"]
    if path == "/ok":
        await _start(send)
        await send({"type": "http.response.body", "body": b"ok"})
    elif path == "/slow":
        await _start(send)
        for i in range(10):
            await send({"type": "http.response.body", "body": b"%d;" % i, "more_body": True})
            await trio.sleep(0.05)
        await send({"type": "http.response.body", "body": b"end"})
    elif path == "/raise-before-start":
        raise ValueError("before start")
    elif path == "/raise-after-start":
        await _start(send)
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise ValueError("after start")
    elif path == "/raise-in-receive":

        async def reader() -> None:
            await receive()
            raise ValueError("while receiving")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.sleep_forever()
    elif path == "/bad-message":
        await send({"type": "http.response.start", "status": "not a number"})


async def _slow_client(url: str, done: list[bytes]) -> None:
    raw = await Raw.connect(url)
    await raw.stream.send_all(get("/slow"))
    with trio.fail_after(5):
        status, _, body = await raw.response()
    assert status == 200
    done.append(body)
    await raw.aclose()


@pytest.mark.parametrize(
    ("path", "status", "body_sent"),
    [
        ("/raise-before-start", 500, b""),
        ("/raise-after-start", 200, b"partial"),
        ("/raise-in-receive", 500, b""),
        ("/bad-message", 500, b""),
    ],
)
async def test_an_app_failure_ends_its_connection_only(
    path: str, status: int, body_sent: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, "gateway.http")
    done: list[bytes] = []
    async with serving(failing_app) as url, trio.open_nursery() as nursery:
        nursery.start_soon(_slow_client, url, done)
        raw = await Raw.connect(url)
        await raw.stream.send_all(
            b"POST " + path.encode() + b" HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\nhi"
        )
        with trio.fail_after(5):
            while b"\r\n\r\n" not in raw.buffer:
                assert await raw._more()
            assert raw.buffer.startswith(b"HTTP/1.1 %d" % status)
            while await raw._more():
                pass  # then closed
        assert body_sent in raw.buffer
        assert not raw.buffer.endswith(b"0\r\n\r\n")  # a cut stream is not made to look whole
        await raw.aclose()
    assert done and done[0].endswith(b"end\r\n0\r\n\r\n")


async def test_the_failure_log_line_cannot_be_forged_by_the_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Found in review: the decoded path was logged, so `%0D%0A` in it wrote a line of the
    # client's choosing into the plain-text log.
    async def raising(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise RuntimeError("no lifespan here")
        raise ValueError("a bug")

    caplog.set_level(logging.ERROR, "gateway.http")
    async with serving(raising) as url:
        raw = await Raw.connect(url)
        await raw.stream.send_all(get("/x%0D%0A2026-01-01%20ERROR%20forged:%20line"))
        with trio.fail_after(5):
            status, _, _ = await raw.response()
        assert status == 500
        await raw.aclose()
    [record] = [r for r in caplog.records if "unhandled error in the app" in r.getMessage()]
    assert "\n" not in record.getMessage() and "\r" not in record.getMessage()
    assert "%0D%0A" in record.getMessage()


async def test_a_failure_in_the_server_itself_ends_that_connection_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = http1._scope

    def flaky(head: Request, base: dict[str, Any]) -> dict[str, Any]:
        if head.target == b"/server-bug":
            raise RuntimeError("a bug in the server")
        return real(head, base)

    monkeypatch.setattr(http1, "_scope", flaky)
    done: list[bytes] = []
    async with serving(failing_app) as url, trio.open_nursery() as nursery:
        nursery.start_soon(_slow_client, url, done)
        raw = await Raw.connect(url)
        await raw.stream.send_all(get("/server-bug"))
        with trio.fail_after(5):
            assert await raw.closed()
        await raw.aclose()
        raw = await Raw.connect(url)  # and the server still serves
        await raw.stream.send_all(get("/ok"))
        with trio.fail_after(5):
            assert (await raw.response())[0] == 200
        await raw.aclose()
    assert done
    assert "a bug in the server" in caplog.text


def _streaming_app(left: trio.Event, stop_at: int = 1000) -> Any:
    """Streams a part every 20 ms until the client leaves (its `http.disconnect`)."""

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise RuntimeError("no lifespan here")
        message: Message = await receive()
        assert message["type"] == "http.request" and not message["more_body"]
        await _start(send)
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                message = await receive()
                assert message["type"] == "http.disconnect"
                left.set()
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            for i in range(stop_at):
                part = b"data: %d\n\n" % i
                try:
                    await send({"type": "http.response.body", "body": part, "more_body": True})
                except ClientDisconnected:
                    await trio.sleep_forever()  # `watch` must hear of it
                await trio.sleep(0.02)

    return app


async def test_leaving_during_a_stream_is_noticed() -> None:
    left = trio.Event()
    async with serving(_streaming_app(left)) as url:
        raw = await Raw.connect(url)
        await raw.stream.send_all(get("/sse"))
        with trio.fail_after(5):
            while b"data: 3" not in raw.buffer:
                assert await raw._more()
        await raw.aclose()
        with trio.fail_after(5):
            await left.wait()


async def test_a_client_sending_during_a_stream_is_not_read_past_a_small_buffer() -> None:
    left = trio.Event()
    async with serving(_streaming_app(left)) as url:
        raw = await Raw.connect(url)
        await raw.stream.send_all(get("/sse"))
        sent = 0
        chunk = b"x" * 65536
        with trio.move_on_after(1):  # the server stops reading: the kernel buffers fill up
            while sent < 256 * 1024 * 1024:
                await raw.stream.send_all(chunk)
                sent += len(chunk)
        assert sent < 64 * 1024 * 1024  # loopback buffers plus HOLD_BYTES, not everything
        await raw.aclose()
        with trio.fail_after(5):
            await left.wait()  # noticed by the next failed write


async def _ok_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        raise RuntimeError("no lifespan here")
    await _start(send)
    await send({"type": "http.response.body", "body": b"ok"})


async def test_past_max_connections_new_ones_wait() -> None:
    async with serving_with(_ok_app, max_connections=2) as (url, server):
        first, second = await Raw.connect(url), await Raw.connect(url)
        for raw in (first, second):
            await raw.stream.send_all(get("/"))
            with trio.fail_after(5):
                assert (await raw.response())[0] == 200
        await trio.testing.wait_all_tasks_blocked(0.05)
        stats = server.statistics()
        assert (stats.connections, stats.idle, stats.free_slots) == (2, 2, 0)
        third = await Raw.connect(url)  # the kernel completes the handshake (backlog)
        await third.stream.send_all(get("/"))
        with trio.move_on_after(0.3) as waited:
            await third.response()
        assert waited.cancelled_caught  # not accepted yet
        await first.stream.send_all(get("/"))  # the open ones are still served
        with trio.fail_after(5):
            assert (await first.response())[0] == 200
        await first.aclose()
        with trio.fail_after(5):
            assert (await third.response())[0] == 200  # a slot was freed
        await second.aclose()
        await third.aclose()


async def test_the_keep_alive_request_cap_says_close_on_the_last_answer() -> None:
    async with serving(_ok_app, keep_alive_max_requests=2) as url:
        raw = await Raw.connect(url)
        await raw.stream.send_all(get("/") + get("/") + get("/"))
        with trio.fail_after(5):
            first, second = await raw.response(), await raw.response()
            assert (first[0], second[0]) == (200, 200)
            assert b"connection: close" not in first[1].lower()
            assert b"connection: close" in second[1].lower()
            assert (await raw.response())[0] is None  # the third is not served here
        await raw.aclose()


async def test_http_1_0_keep_alive() -> None:
    async with serving(_ok_app) as url:
        raw = await Raw.connect(url)
        request = b"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n"
        await raw.stream.send_all(request)
        with trio.fail_after(5):
            status, head, _ = await raw.response()
            assert status == 200 and b"connection: close" not in head.lower()
            await raw.stream.send_all(b"GET / HTTP/1.0\r\n\r\n")
            status, head, _ = await raw.response()
            assert status == 200 and b"connection: close" in head.lower()
            assert await raw.closed()
        await raw.aclose()


async def _refusing_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        raise RuntimeError("no lifespan here")
    await _start(send, 413)  # without reading the body
    await send({"type": "http.response.body", "body": b"too large"})


async def test_an_answer_before_a_large_unread_body_closes_after_it() -> None:
    async with serving(_refusing_app) as url:
        raw = await Raw.connect(url)
        big = 3 * 1024 * 1024
        await raw.stream.send_all(
            b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n" % big + b"x" * 65536
        )
        with trio.fail_after(5):
            status, head, body = await raw.response()
            assert (status, body) == (413, b"too large")
            assert b"connection: close" in head.lower()
            assert await raw.closed()
        await raw.aclose()


async def test_an_answer_before_a_small_unread_body_keeps_the_connection() -> None:
    async with serving(_refusing_app) as url:
        raw = await Raw.connect(url)
        await raw.stream.send_all(
            b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 5000\r\n\r\n" + b"x" * 5000 + get("/")
        )
        with trio.fail_after(5):
            first, second = await raw.response(), await raw.response()
        assert (first[0], second[0]) == (413, 413)
        assert b"connection: close" not in first[1].lower()
        await raw.aclose()


async def test_a_server_cancelled_from_outside_closes_its_listening_sockets() -> None:
    server = Http1Server(failing_app, ServerConfig())
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, listeners, trio.sleep_forever)
        nursery.cancel_scope.cancel()  # no shutdown trigger: the owner's scope went away
    assert [listener.socket.fileno() for listener in listeners] == [-1] * len(listeners)
