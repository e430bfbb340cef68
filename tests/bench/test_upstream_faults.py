"""Per-model faults of the simulated upstream over real sockets: each kind hits the model it is
set for and no other, a seed replays its draws, and the server serves normally afterwards."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from bench.upstream import Faults, UpstreamBehavior, UpstreamServer, serve_upstream
from tests.bench.sse import events, openai_chunks
from tests.waiting import wait_until

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
ANTHROPIC_HEADERS = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> UpstreamServer:
    started: UpstreamServer = await nursery.start(serve_upstream)
    return started


@pytest.fixture
async def client(upstream: UpstreamServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=upstream.url, headers={"authorization": "Bearer sk-test"}, timeout=10
    ) as c:
        yield c


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def anthropic(model: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


def embed(model: str) -> dict[str, Any]:
    return {"model": model, "input": "a b"}


def set_faults(upstream: UpstreamServer, seed: int = 0, **faults: Faults) -> None:
    upstream.behavior = UpstreamBehavior(
        completion_tokens=4, faults=dict(faults.items()), fault_seed=seed
    )


def raw_request(path: str, payload: dict[str, Any], extra: str = "") -> bytes:
    body = json.dumps(payload).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer k\r\n{extra}"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def connect(upstream: UpstreamServer) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", int(upstream.url.rsplit(":", 1)[1]))


async def read_until_closed(stream: trio.SocketStream) -> tuple[bytes, BaseException | None]:
    """Everything the server sends, and the error that ended it (None: a clean close)."""
    received = b""
    with trio.fail_after(5):
        try:
            while data := await stream.receive_some():
                received += data
        except trio.BrokenResourceError as exc:
            return received, exc.__cause__
    return received, None


async def still_serves(upstream: UpstreamServer, model: str = "sim-a") -> None:
    """A new connection gets a normal completion, once the faults are gone."""
    upstream.behavior.faults = {}
    async with httpx.AsyncClient(base_url=upstream.url, timeout=10) as fresh:
        r = await fresh.post(CHAT, json=chat(model), headers={"authorization": "Bearer k"})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "stop"


def counts(upstream: UpstreamServer, model: str = "sim-a") -> dict[str, int]:
    return {k: v for k, v in upstream.fault_statistics()[model].items() if v}


# --- answered with an error ----------------------------------------------------------------


async def test_error_rate_fails_that_model_in_each_wire_format(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    set_faults(upstream, **{"sim-a": Faults(error_rate=1.0, error_status=503)})
    for path, payload in [(CHAT, chat("sim-a")), (CHAT, chat("sim-a", stream=True))]:
        r = await client.post(path, json=payload)
        assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
    r = await client.post("/v1/embeddings", json=embed("sim-a"))
    assert r.status_code == 503 and "error" in r.json()
    for stream in (False, True):
        r = await client.post(
            MESSAGES, json=anthropic("sim-a", stream=stream), headers=ANTHROPIC_HEADERS
        )
        assert r.status_code == 503
        assert r.json() == {
            "type": "error",
            "error": {"type": "api_error", "message": "simulated upstream failure (503)"},
        }
    # Another model, and requests without one, are answered as usual.
    assert (await client.post(CHAT, json=chat("sim-b"))).status_code == 200
    assert (await client.post("/v1/embeddings", json=embed("sim-b"))).status_code == 200
    assert (await client.get("/v1/models")).status_code == 200
    assert counts(upstream) == {"requests": 5, "error": 5}
    assert counts(upstream, "sim-b") == {"requests": 2}
    await still_serves(upstream)


@pytest.mark.parametrize(
    ("path", "payload", "error"),
    [
        ("/v1/responses", {"model": "sim-a", "input": "hi"}, "error"),
        ("/v1/rerank", {"model": "sim-a", "query": "q", "documents": ["d"]}, "error"),
        ("/cohere/v1/rerank", {"model": "sim-a", "query": "q", "documents": ["d"]}, "message"),
    ],
)
async def test_error_rate_on_other_routes_naming_a_model(
    upstream: UpstreamServer, client: httpx.AsyncClient, path: str, payload: Any, error: str
) -> None:
    set_faults(upstream, **{"sim-a": Faults(error_rate=1.0, error_status=502)})
    r = await client.post(path, json=payload)
    assert r.status_code == 502 and error in r.json()
    assert (await client.post(path, json={**payload, "model": "sim-b"})).status_code == 200


async def test_rate_limit_with_retry_after_in_both_shapes(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    set_faults(upstream, **{"claude-a": Faults(rate_limit_rate=1.0, retry_after="3")})
    r = await client.post(MESSAGES, json=anthropic("claude-a"), headers=ANTHROPIC_HEADERS)
    assert r.status_code == 429 and r.headers["retry-after"] == "3"
    assert r.json()["error"]["type"] == "rate_limit_error"
    r = await client.post(CHAT, json=chat("claude-a", stream=True))
    assert r.status_code == 429 and r.headers["retry-after"] == "3"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    r = await client.post(MESSAGES, json=anthropic("claude-b"), headers=ANTHROPIC_HEADERS)
    assert r.status_code == 200
    assert counts(upstream, "claude-a") == {"requests": 2, "rate_limit": 2}
    await still_serves(upstream, "claude-a")


async def test_every_kth_request_fails_exactly(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    set_faults(upstream, **{"sim-a": Faults(error_rate=1.0, every=3)})
    statuses = []
    for _ in range(7):
        statuses.append((await client.post(CHAT, json=chat("sim-a"))).status_code)
        assert (await client.post(CHAT, json=chat("sim-b"))).status_code == 200
    assert statuses == [200, 200, 500, 200, 200, 500, 200]
    # A new Faults object starts counting again.
    upstream.behavior.faults["sim-a"] = Faults(error_rate=1.0, every=2)
    statuses = [(await client.post(CHAT, json=chat("sim-a"))).status_code for _ in range(4)]
    assert statuses == [200, 500, 200, 500]
    assert counts(upstream) == {"requests": 11, "error": 4}


async def _statuses(client: httpx.AsyncClient, model: str, n: int) -> list[int]:
    return [(await client.post(CHAT, json=chat(model))).status_code for _ in range(n)]


async def test_a_seed_gives_the_same_sequence_every_time(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    mixed = Faults(error_rate=0.3, rate_limit_rate=0.3)
    set_faults(upstream, seed=7, **{"sim-a": mixed, "sim-b": Faults(error_rate=0.5)})
    first = await _statuses(client, "sim-a", 30)
    assert {200, 429, 500} == set(first)
    assert counts(upstream) == {
        "requests": 30,
        "error": first.count(500),
        "rate_limit": first.count(429),
    }
    # The same seed again (a new Faults restarts the draws), with another model's requests in
    # between this time: one model's draws never depend on another's traffic.
    set_faults(upstream, seed=7, **{"sim-a": Faults(error_rate=0.3, rate_limit_rate=0.3)})
    again = []
    for _ in range(30):
        again += await _statuses(client, "sim-a", 1)
        await _statuses(client, "sim-b", 1)
    assert again == first
    set_faults(upstream, seed=8, **{"sim-a": Faults(error_rate=0.3, rate_limit_rate=0.3)})
    assert await _statuses(client, "sim-a", 30) != first


async def test_a_seed_replays_on_another_server(nursery: trio.Nursery) -> None:
    runs = []
    for _ in range(2):
        behavior = UpstreamBehavior(faults={"sim-a": Faults(error_rate=0.5)}, fault_seed=3)
        server: UpstreamServer = await nursery.start(partial(serve_upstream, behavior=behavior))
        async with httpx.AsyncClient(
            base_url=server.url, headers={"authorization": "Bearer k"}
        ) as c:
            runs.append(await _statuses(c, "sim-a", 20))
    assert runs[0] == runs[1] and {200, 500} == set(runs[0])


# --- streams cut short ---------------------------------------------------------------------


async def test_reset_after_frames_sends_a_tcp_reset(upstream: UpstreamServer) -> None:
    set_faults(upstream, **{"sim-a": Faults(reset_after_frames=2)})
    async with await connect(upstream) as stream:
        await stream.send_all(raw_request(CHAT, chat("sim-a", stream=True)))
        received, error = await read_until_closed(stream)
    assert isinstance(error, ConnectionResetError)
    assert b"tok0 " in received and b"tok1 " in received and b"tok2 " not in received
    # break_after_chunks, by contrast, closes cleanly; and another model streams to the end.
    upstream.behavior.break_after_chunks = 1
    async with await connect(upstream) as stream:
        await stream.send_all(raw_request(CHAT, chat("sim-b", stream=True)))
        received, error = await read_until_closed(stream)
    assert error is None and b"tok0 " in received and b"tok1 " not in received
    upstream.behavior.break_after_chunks = None
    async with await connect(upstream) as stream:
        await stream.send_all(
            raw_request(CHAT, chat("sim-b", stream=True), "connection: close\r\n")
        )
        received, error = await read_until_closed(stream)
    assert error is None and received.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    await upstream.wait_streams_idle()
    assert upstream.statistics()["streams_broken"] == 2
    assert counts(upstream) == {"requests": 1, "reset": 1}
    await still_serves(upstream)


async def test_reset_of_a_json_answer_and_of_anthropic_streams(upstream: UpstreamServer) -> None:
    set_faults(upstream, **{"sim-a": Faults(reset_after_frames=0)})
    async with await connect(upstream) as stream:
        await stream.send_all(raw_request("/v1/embeddings", embed("sim-a")))
        received, error = await read_until_closed(stream)
    assert received == b"" and isinstance(error, ConnectionResetError)
    async with await connect(upstream) as stream:
        payload = anthropic("sim-a", stream=True)
        extra = "x-api-key: k\r\nanthropic-version: 2023-06-01\r\n"
        await stream.send_all(raw_request(MESSAGES, payload, extra))
        received, error = await read_until_closed(stream)
    assert isinstance(error, ConnectionResetError)
    assert b"event: message_start" in received and b"content_block_delta" not in received
    assert counts(upstream) == {"requests": 2, "reset": 2}
    await still_serves(upstream)


async def test_error_frame_ends_an_openai_stream(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    set_faults(upstream, **{"sim-a": Faults(error_frame_after=2)})
    r = await client.post(CHAT, json=chat("sim-a", stream=True))
    assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
    datas = [json.loads(data) for _, data in events(r.text)]
    assert [d["choices"][0]["delta"].get("content") for d in datas[:-1]] == ["", "tok0 ", "tok1 "]
    assert datas[-1] == {
        "error": {
            "message": "simulated upstream failure in the stream (500)",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    # The body ended properly: the same connection serves the next request, other models and
    # JSON answers are untouched.
    assert len(openai_chunks((await client.post(CHAT, json=chat("sim-b", stream=True))).text)) == 6
    assert (await client.post(CHAT, json=chat("sim-a"))).status_code == 200
    assert upstream.statistics()["connections_open"] == 1
    await upstream.wait_streams_idle()
    assert upstream.statistics()["streams_broken"] == 1
    assert counts(upstream) == {"requests": 2, "error_frame": 1}


async def test_error_frame_ends_an_anthropic_stream(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    set_faults(upstream, **{"claude-a": Faults(error_frame_after=1, error_status=529)})
    r = await client.post(
        MESSAGES, json=anthropic("claude-a", stream=True), headers=ANTHROPIC_HEADERS
    )
    assert r.status_code == 200
    names = [name for name, _ in events(r.text)]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "error",
    ]
    assert json.loads(events(r.text)[-1][1]) == {
        "type": "error",
        "error": {
            "type": "overloaded_error",
            "message": "simulated upstream failure in the stream (529)",
        },
    }
    r = await client.post(
        MESSAGES, json=anthropic("claude-b", stream=True), headers=ANTHROPIC_HEADERS
    )
    assert [name for name, _ in events(r.text)][-1] == "message_stop"
    assert counts(upstream, "claude-a") == {"requests": 1, "error_frame": 1}


async def test_the_earliest_cut_wins(upstream: UpstreamServer, client: httpx.AsyncClient) -> None:
    upstream.behavior = UpstreamBehavior(
        break_after_chunks=3, faults={"sim-a": Faults(error_frame_after=1, reset_after_frames=1)}
    )
    async with await connect(upstream) as stream:
        await stream.send_all(raw_request(CHAT, chat("sim-a", stream=True)))
        received, error = await read_until_closed(stream)
    assert isinstance(error, ConnectionResetError)  # reset beats an error frame at the same N
    assert b"tok0 " in received and b"tok1 " not in received
    upstream.behavior.faults = {"sim-a": Faults(error_frame_after=5)}
    with pytest.raises(httpx.RemoteProtocolError):  # break_after_chunks=3 comes first
        await client.post(CHAT, json=chat("sim-a", stream=True))
    assert counts(upstream) == {"requests": 2, "reset": 1}


# --- silence and slowness (Trio's clock, jumping) -------------------------------------------


async def test_stall_sends_nothing_until_the_client_leaves(
    upstream: UpstreamServer, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    set_faults(upstream, **{"sim-a": Faults(stall=True)})
    async with await connect(upstream) as stream:
        await stream.send_all(raw_request("/v1/embeddings", embed("sim-a")))
        with trio.move_on_after(3600) as waited:
            await stream.receive_some()
        assert waited.cancelled_caught
        # Meanwhile other models are served.
        assert (await client.post(CHAT, json=chat("sim-b"))).status_code == 200
    await wait_until(lambda: upstream.statistics()["connections_open"] == 1)
    assert counts(upstream) == {"requests": 1, "stall": 1}
    await still_serves(upstream)


async def test_stall_after_frames_and_after_a_json_head(
    upstream: UpstreamServer, autojump_clock: trio.testing.MockClock
) -> None:
    set_faults(upstream, **{"sim-a": Faults(stall_after_frames=1)})
    async with await connect(upstream) as stream:
        await stream.send_all(raw_request(CHAT, chat("sim-a", stream=True)))
        received = b""
        with trio.move_on_after(3600):
            while True:
                received += await stream.receive_some()
        assert received.startswith(b"HTTP/1.1 200 OK\r\n") and b"tok0 " in received
        assert b"tok1 " not in received
        assert upstream.statistics()["streams_active"] == 1
    with trio.fail_after(5):
        await upstream.wait_streams_idle()
    assert upstream.statistics()["streams_client_closed"] == 1
    async with await connect(upstream) as stream:
        await stream.send_all(raw_request(CHAT, chat("sim-a")))
        received = b""
        with trio.move_on_after(3600):
            while True:
                received += await stream.receive_some()
        assert received.startswith(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
        assert received.endswith(b"\r\n\r\n") and b"content-length: " in received
    assert counts(upstream) == {"requests": 2, "stall_after_frames": 2}
    await still_serves(upstream)


async def test_slow_first_byte_delays_that_model_only(
    upstream: UpstreamServer, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    set_faults(upstream, **{"sim-a": Faults(slow_first_byte_s=30)})
    for payload in (chat("sim-a"), chat("sim-a", stream=True)):
        start = trio.current_time()
        r = await client.post(CHAT, json=payload, timeout=60)
        assert r.status_code == 200 and trio.current_time() - start >= 30
    start = trio.current_time()
    assert (await client.post(CHAT, json=chat("sim-b"))).status_code == 200
    assert trio.current_time() - start < 1
    assert counts(upstream) == {"requests": 2, "slow_first_byte": 2}


# --- what is left alone --------------------------------------------------------------------


async def test_bodies_without_a_model_and_no_faults(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    assert (await client.post(CHAT, json=chat("sim-a"))).status_code == 200
    assert upstream.fault_statistics() == {}  # nothing is read while no fault is configured
    set_faults(upstream, **{"sim-a": Faults(error_rate=1.0)})
    for body in (b"\xff\xfe", b"[1]", b'{"model": 5}', b"[" * 100_000 + b"]" * 100_000):
        r = await client.post(CHAT, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400
    assert upstream.fault_statistics() == {}
    await still_serves(upstream)
