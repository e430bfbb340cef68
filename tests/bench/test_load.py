"""The load driver against a tiny raw-socket HTTP/1.1 server written here (no bench.upstream)."""

from __future__ import annotations

import json
import math
import re
import socket
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.lowlevel

from bench.http_client import ProtocolError, ResponseParser, StaleConnection, StreamCut
from bench.load import LoadResult, Scenario, percentile, run_load

JSON_BODY = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()
EVENTS = [b'data: {"choices":[{"index":0,"delta":{"content":"tok%d"}}]}\n\n' % i for i in range(20)]
DONE = b"data: [DONE]\n\n"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def json_response(status: int = 200, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        status,
        len(JSON_BODY),
        extra,
        JSON_BODY,
    )


SSE_RESPONSE = SSE_HEAD + b"".join(chunk(e) for e in [*EVENTS, DONE]) + b"0\r\n\r\n"

Responder = Callable[["FakeServer", trio.SocketStream], Awaitable[bool]]


async def _json(server: FakeServer, stream: trio.SocketStream) -> bool:
    await stream.send_all(json_response())
    return True


async def _sse(server: FakeServer, stream: trio.SocketStream) -> bool:
    await stream.send_all(SSE_RESPONSE)
    return True


async def _sse_slow_tail(server: FakeServer, stream: trio.SocketStream) -> bool:
    # The first frame arrives at once, the rest 30 ms later: ttfb must be well under latency.
    await stream.send_all(SSE_HEAD + chunk(EVENTS[0]))
    await trio.sleep(0.03)
    await stream.send_all(b"".join(chunk(e) for e in [*EVENTS[1:], DONE]) + b"0\r\n\r\n")
    return True


async def _sse_trickle(server: FakeServer, stream: trio.SocketStream) -> bool:
    for i in range(0, len(SSE_RESPONSE), 7):
        await stream.send_all(SSE_RESPONSE[i : i + 7])
        await trio.lowlevel.checkpoint()
    return True


async def _cut_clean(server: FakeServer, stream: trio.SocketStream) -> bool:
    await stream.send_all(SSE_HEAD + b"".join(chunk(e) for e in EVENTS[:5]) + b"0\r\n\r\n")
    return True


async def _cut_close(server: FakeServer, stream: trio.SocketStream) -> bool:
    await stream.send_all(SSE_HEAD + b"".join(chunk(e) for e in EVENTS[:5]))
    return False


async def _error_frame(server: FakeServer, stream: trio.SocketStream) -> bool:
    # A stream that broke after its first frames, as the gateway ends one: error frame, [DONE].
    error = b'data: {"error":{"message":"upstream broke","type":"upstream_error"}}\n\n'
    frames = [*EVENTS[:3], error, DONE]
    await stream.send_all(SSE_HEAD + b"".join(chunk(e) for e in frames) + b"0\r\n\r\n")
    return True


async def _error500(server: FakeServer, stream: trio.SocketStream) -> bool:
    await stream.send_all(json_response(500))
    return True


async def _garbage(server: FakeServer, stream: trio.SocketStream) -> bool:
    await stream.send_all(b"SMTP ready\r\n\r\n")
    return False


async def _close(server: FakeServer, stream: trio.SocketStream) -> bool:
    await stream.send_all(json_response(extra=b"connection: close\r\n"))
    return False


async def _drop(server: FakeServer, stream: trio.SocketStream) -> bool:
    # Keep-alive promised, then the idle connection is closed (as a server's idle timeout does).
    await stream.send_all(json_response())
    return False


async def _hang(server: FakeServer, stream: trio.SocketStream) -> bool:
    await trio.sleep_forever()
    return False  # pragma: no cover


RESPONDERS: dict[str, Responder] = {
    "json": _json,
    "sse": _sse,
    "sse_slow_tail": _sse_slow_tail,
    "sse_trickle": _sse_trickle,
    "cut_clean": _cut_clean,
    "cut_close": _cut_close,
    "error500": _error500,
    "error_frame": _error_frame,
    "garbage": _garbage,
    "close": _close,
    "drop": _drop,
    "hang": _hang,
}


class FakeServer:
    """Answers every request with the responder named by `behaviour`; counts what it sees."""

    def __init__(self, behaviour: str = "json") -> None:
        self.behaviour = behaviour
        self.connections = 0
        self.requests = 0
        self.last_head = b""
        self.last_body = b""
        self.port = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                match = re.search(rb"(?im)^content-length: *(\d+)", head)
                length = int(match.group(1)) if match else 0
                while len(buf) < length:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                self.last_head, self.last_body, buf = head, buf[:length], buf[length:]
                self.requests += 1
                if not await RESPONDERS[self.behaviour](self, stream):
                    return
        except trio.BrokenResourceError:
            return
        finally:
            await stream.aclose()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self.handle, listeners, task_status=task_status)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture
async def server(nursery: trio.Nursery) -> FakeServer:
    srv = FakeServer()
    await nursery.start(srv.serve)
    return srv


def scenario(base_url: str, **overrides: object) -> Scenario:
    values: dict[str, object] = {
        "name": "test",
        "base_url": base_url,
        "api_key": "sk-test",
        "model": "sim-small",
        "stream": False,
        "concurrency": 1,
        "requests": 10,
        "warmup_s": 0.0,
        "timeout_s": 5.0,
    }
    values.update(overrides)
    return Scenario(**values)  # type: ignore[arg-type]


async def test_requests_bound_and_keep_alive_reuse(server: FakeServer) -> None:
    with trio.fail_after(10):
        result = await run_load(scenario(server.base_url, concurrency=4, requests=50))
    assert result.completed == 50
    assert result.error_count == 0
    assert server.requests == 50
    assert server.connections == 4 == result.connections
    assert len(result.latencies_s) == len(result.ttfb_s) == 50
    assert all(0 < t <= lat for t, lat in zip(result.ttfb_s, result.latencies_s, strict=True))
    assert result.statuses == {200: 50}
    assert result.body_bytes == 50 * len(JSON_BODY)
    assert result.rps > 0


async def test_request_is_an_openai_chat_completion(server: FakeServer) -> None:
    await run_load(scenario(server.base_url, requests=1, stream=True, max_tokens=7))
    head = server.last_head.decode()
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    assert "Authorization: Bearer sk-test\r\n" in head
    assert f"Host: 127.0.0.1:{server.port}\r\n" in head
    body = json.loads(server.last_body)
    assert body["model"] == "sim-small"
    assert body["stream"] is True
    assert body["max_tokens"] == 7
    assert body["messages"][0]["role"] == "user"


async def test_sse_streams_complete_and_ttfb_is_first_frame(server: FakeServer) -> None:
    server.behaviour = "sse_slow_tail"
    with trio.fail_after(10):
        result = await run_load(scenario(server.base_url, stream=True, requests=8, concurrency=2))
    assert result.completed == 8
    assert result.error_count == 0
    assert result.p50_ms >= 30
    assert result.ttfb_p50_ms < result.p50_ms - 20


async def test_sse_frames_split_across_reads(server: FakeServer) -> None:
    server.behaviour = "sse_trickle"
    with trio.fail_after(10):
        result = await run_load(scenario(server.base_url, stream=True, requests=5))
    assert (result.completed, result.error_count) == (5, 0)
    assert result.body_bytes == 5 * (sum(map(len, EVENTS)) + len(DONE))


async def test_warmup_requests_are_not_recorded(server: FakeServer) -> None:
    with trio.fail_after(10):
        result = await run_load(scenario(server.base_url, requests=20, warmup_s=0.2))
    assert result.completed == 20
    assert len(result.latencies_s) == 20
    assert server.requests > 20  # the warmup did send requests


async def test_duration_bound_stops_by_itself(server: FakeServer) -> None:
    seen: list[int] = []
    start = trio.current_time()
    with trio.fail_after(5):
        result = await run_load(
            scenario(server.base_url, requests=None, duration_s=0.3, warmup_s=0.1, concurrency=3),
            on_progress=seen.append,
        )
    assert 0.4 <= trio.current_time() - start < 2.0
    assert result.completed > 10
    assert 0 < result.elapsed_s <= 0.3
    assert result.rps == pytest.approx(result.completed / result.elapsed_s)
    assert seen == list(range(1, result.completed + 1))


@pytest.mark.parametrize(
    ("behaviour", "stream", "kind"),
    [
        ("error500", False, "status_500"),
        ("cut_clean", True, "stream_cut"),
        ("cut_close", True, "stream_cut"),
        ("error_frame", True, "stream_error"),
        ("garbage", False, "protocol"),
        ("json", True, "stream_cut"),  # a JSON answer to a stream request has no [DONE]
    ],
)
async def test_error_classification(
    server: FakeServer, behaviour: str, stream: bool, kind: str
) -> None:
    server.behaviour = behaviour
    with trio.fail_after(10):
        result = await run_load(scenario(server.base_url, stream=stream, requests=5))
    assert result.errors == {kind: 5}
    assert result.completed == 0
    assert result.latencies_s == []
    # After an error the worker reconnects.
    assert server.connections == 5


async def test_connection_refused_is_a_connect_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with trio.fail_after(10):
        result = await run_load(scenario(f"http://127.0.0.1:{port}/v1", requests=3))
    assert result.errors == {"connect": 3}
    assert result.completed == 0
    assert result.rps == 0


async def test_slow_response_is_a_timeout(server: FakeServer) -> None:
    server.behaviour = "hang"
    with trio.fail_after(10):
        result = await run_load(scenario(server.base_url, requests=2, timeout_s=0.1))
    assert result.errors == {"timeout": 2}
    assert server.connections == 2


async def test_connection_close_reconnects_without_errors(server: FakeServer) -> None:
    server.behaviour = "close"
    result = await run_load(scenario(server.base_url, requests=10))
    assert (result.completed, result.error_count) == (10, 0)
    assert server.connections == 10


async def test_stale_keep_alive_connection_is_retried(server: FakeServer) -> None:
    server.behaviour = "drop"
    result = await run_load(scenario(server.base_url, requests=10))
    assert (result.completed, result.error_count) == (10, 0)
    assert server.requests == 10


def test_parser_chunked_sse_fed_byte_by_byte() -> None:
    parser = ResponseParser(sse=True)
    for i in range(len(SSE_RESPONSE)):
        parser.feed(SSE_RESPONSE[i : i + 1])
        if SSE_RESPONSE[: i + 1].endswith(b"data:"):
            assert parser.first_byte
    assert parser.complete and parser.done and parser.keep_alive
    assert parser.status == 200


def test_parser_skips_interim_response_and_reads_until_close() -> None:
    parser = ResponseParser(sse=False)
    parser.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\nhello")
    assert not parser.complete and parser.status == 200 and not parser.keep_alive
    parser.feed(b" world")
    parser.feed_eof()
    assert parser.complete and parser.body_bytes == 11


def test_parser_errors() -> None:
    with pytest.raises(ProtocolError):
        ResponseParser(sse=False).feed(b"HTTP/1.1 abc\r\n\r\n")
    with pytest.raises(ProtocolError):
        ResponseParser(sse=False).feed(SSE_HEAD + b"zz\r\n")
    with pytest.raises(ProtocolError):
        ResponseParser(sse=False).feed(json_response() + b"extra")
    with pytest.raises(StaleConnection):
        ResponseParser(sse=False).feed_eof()
    cut = ResponseParser(sse=True)
    cut.feed(SSE_HEAD + chunk(EVENTS[0]))
    with pytest.raises(StreamCut):
        cut.feed_eof()


def test_percentile_math() -> None:
    assert math.isnan(percentile([], 50))
    assert percentile([5.0], 99) == 5.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    values = [float(v) for v in range(100, 0, -1)]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile(values, 90) == pytest.approx(90.1)


def test_load_result_properties() -> None:
    result = LoadResult(
        scenario("http://x/v1"),
        latencies_s=[0.001, 0.002, 0.003],
        ttfb_s=[0.0005, 0.001, 0.0015],
        completed=3,
        elapsed_s=1.5,
    )
    result.errors.update({"timeout": 2, "status_500": 1})
    assert result.rps == 2.0
    assert result.p50_ms == pytest.approx(2.0)
    assert result.p99_ms == pytest.approx(2.98)
    assert result.ttfb_p50_ms == pytest.approx(1.0)
    assert result.error_count == 3


def test_scenario_needs_exactly_one_bound() -> None:
    with pytest.raises(ValueError):
        scenario("http://x/v1", requests=None)
    with pytest.raises(ValueError):
        scenario("http://x/v1", duration_s=1.0)
    with pytest.raises(ValueError):
        scenario("ftp://x/v1").request_bytes()
