"""The simulated upstream over real sockets: wire formats, injected failures, HTTP/1.1, the CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from bench.upstream import UpstreamBehavior, UpstreamServer, serve_upstream, server
from tests.bench.sse import events, openai_chunks
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"
ANTHROPIC_HEADERS = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "hello there world"}]},
]
PROMPT_TOKENS = 2 + 3 + 3 * 2  # words in the messages + 3 per message


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


async def _connect(upstream: UpstreamServer) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", int(upstream.url.rsplit(":", 1)[1]))


def _raw_request(path: str, payload: dict[str, Any], extra: str = "") -> bytes:
    body = json.dumps(payload).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer k\r\n{extra}"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def words(n: int, stem: str = "tok") -> str:
    return "".join(f"{stem}{i} " for i in range(n))


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "sim-small", "messages": MESSAGES, **extra}


def anthropic(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sim",
        "max_tokens": 100,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hello there world"}],
        **extra,
    }


# --- OpenAI chat ---------------------------------------------------------------------------


async def test_openai_chat_json_content_and_usage(client: httpx.AsyncClient) -> None:
    response = await client.post(CHAT, json=chat())
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert isinstance(body["created"], int)
    assert body["model"] == "sim-small"
    [choice] = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": words(20)}
    assert choice["finish_reason"] == "stop"
    assert body["usage"] == {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": 20,
        "total_tokens": PROMPT_TOKENS + 20,
    }


@pytest.mark.parametrize(
    ("limits", "tokens", "finish"),
    [
        ({"max_tokens": 5}, 5, "length"),
        ({"max_completion_tokens": 3, "max_tokens": 50}, 3, "length"),
        ({"max_tokens": 20}, 20, "stop"),
        ({"max_tokens": 500}, 20, "stop"),
    ],
)
async def test_openai_max_tokens_truncates_with_length(
    client: httpx.AsyncClient, limits: dict[str, int], tokens: int, finish: str
) -> None:
    body = (await client.post(CHAT, json=chat(**limits))).json()
    assert body["choices"][0]["message"]["content"] == words(tokens)
    assert body["choices"][0]["finish_reason"] == finish
    assert body["usage"]["completion_tokens"] == tokens


async def test_openai_stream_without_usage(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior.completion_tokens = 4
    response = await client.post(CHAT, json=chat(stream=True))
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["transfer-encoding"] == "chunked"
    chunks = openai_chunks(response.text)
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "tok0 "},
        {"content": "tok1 "},
        {"content": "tok2 "},
        {"content": "tok3 "},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 5 + ["stop"]
    assert len({(c["id"], c["created"], c["model"], c["object"]) for c in chunks}) == 1
    assert chunks[0]["object"] == "chat.completion.chunk" and chunks[0]["model"] == "sim-small"
    assert all("usage" not in c for c in chunks)


async def test_openai_stream_with_include_usage(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior = UpstreamBehavior(completion_tokens=5, tokens_per_chunk=2)
    payload = chat(stream=True, stream_options={"include_usage": True}, max_tokens=50)
    chunks = openai_chunks((await client.post(CHAT, json=payload)).text)
    *choice_chunks, usage_chunk = chunks
    contents = [c["choices"][0]["delta"].get("content") for c in choice_chunks]
    assert contents == ["", "tok0 tok1 ", "tok2 tok3 ", "tok4 ", None]
    assert all(c["usage"] is None for c in choice_chunks)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": 5,
        "total_tokens": PROMPT_TOKENS + 5,
    }
    assert usage_chunk["id"] == chunks[0]["id"]


async def test_openai_stream_max_tokens_finishes_with_length(client: httpx.AsyncClient) -> None:
    payload = chat(stream=True, max_tokens=2, stream_options={"include_usage": True})
    chunks = openai_chunks((await client.post(CHAT, json=payload)).text)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == words(2)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 2


async def test_openai_tool_call_json_and_stream(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior.tool_call = True
    body = (await client.post(CHAT, json=chat())).json()
    [choice] = body["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}

    chunks = openai_chunks((await client.post(CHAT, json=chat(stream=True))).text)
    parts = [p for c in chunks for p in c["choices"][0]["delta"].get("tool_calls", [])]
    head, *fragments = parts
    assert head["index"] == 0 and head["id"].startswith("call_") and head["type"] == "function"
    assert head["function"] == {"name": "get_weather", "arguments": ""}
    assert len(fragments) > 1 and all(set(p) == {"index", "function"} for p in fragments)
    assert fragments[0]["function"]["arguments"] == '{"city"'
    arguments = "".join(p["function"]["arguments"] for p in fragments)
    assert json.loads(arguments) == {"city": "Paris"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_openai_reasoning_precedes_content(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior = UpstreamBehavior(reasoning=True, completion_tokens=2)
    chunks = openai_chunks((await client.post(CHAT, json=chat(stream=True))).text)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[1:] == [
        {"reasoning": "think0 "},
        {"reasoning": "think1 "},
        {"reasoning": "think2 "},
        {"content": "tok0 "},
        {"content": "tok1 "},
        {},
    ]
    message = (await client.post(CHAT, json=chat())).json()["choices"][0]["message"]
    assert message["reasoning"] == words(3, "think") and message["content"] == words(2)


# --- OpenAI embeddings and models -----------------------------------------------------------


async def test_embeddings_for_a_string_and_a_list(client: httpx.AsyncClient) -> None:
    one = (await client.post("/v1/embeddings", json={"model": "e", "input": "a b c"})).json()
    assert one["object"] == "list" and one["model"] == "e"
    assert one["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    [item] = one["data"]
    assert item["object"] == "embedding" and item["index"] == 0
    assert len(item["embedding"]) == 256
    assert all(isinstance(x, float) and -1 <= x <= 1 for x in item["embedding"])

    many = (
        await client.post("/v1/embeddings", json={"model": "e", "input": ["a b c", "d"]})
    ).json()
    assert [d["index"] for d in many["data"]] == [0, 1]
    assert many["data"][0]["embedding"] == item["embedding"]  # deterministic per text
    assert many["data"][1]["embedding"] != item["embedding"]
    assert many["usage"]["prompt_tokens"] == 4


async def test_embeddings_reject_other_input(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/embeddings", json={"model": "e", "input": {"x": 1}})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_models_list(client: httpx.AsyncClient) -> None:
    body = (await client.get("/v1/models")).json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["sim-small", "sim-large"]
    assert body["data"][0] == {
        "id": "sim-small",
        "object": "model",
        "created": 0,
        "owned_by": "simulator",
    }


# --- Anthropic --------------------------------------------------------------------------------


async def test_anthropic_json_text_and_usage(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/messages", json=anthropic(), headers=ANTHROPIC_HEADERS)
    assert response.status_code == 200
    body = response.json()
    assert body["id"].startswith("msg_")
    assert (body["type"], body["role"], body["model"]) == ("message", "assistant", "claude-sim")
    assert body["content"] == [{"type": "text", "text": words(20)}]
    assert body["stop_reason"] == "end_turn" and body["stop_sequence"] is None
    assert body["usage"] == {"input_tokens": 2 + 3 + 3, "output_tokens": 20}

    short = await client.post(
        "/v1/messages", json=anthropic(max_tokens=4), headers=ANTHROPIC_HEADERS
    )
    assert short.json()["stop_reason"] == "max_tokens"
    assert short.json()["content"][0]["text"] == words(4)


async def test_anthropic_json_thinking_and_tool_use(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior = UpstreamBehavior(reasoning=True, tool_call=True)
    body = (await client.post("/v1/messages", json=anthropic(), headers=ANTHROPIC_HEADERS)).json()
    thinking, tool = body["content"]
    assert thinking == {"type": "thinking", "thinking": words(3, "think"), "signature": "sig"}
    assert tool["type"] == "tool_use" and tool["id"].startswith("toolu_")
    assert (tool["name"], tool["input"]) == ("get_weather", {"city": "Paris"})
    assert body["stop_reason"] == "tool_use"


async def test_anthropic_stream_event_order_and_usage(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior.completion_tokens = 3
    response = await client.post(
        "/v1/messages", json=anthropic(stream=True), headers=ANTHROPIC_HEADERS
    )
    assert response.headers["content-type"] == "text/event-stream"
    stream = events(response.text)
    names = [name for name, _ in stream]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    payloads = [json.loads(data) for _, data in stream]
    assert [p["type"] for p in payloads] == names
    message = payloads[0]["message"]
    assert message["id"].startswith("msg_") and message["model"] == "claude-sim"
    assert message["content"] == [] and message["stop_reason"] is None
    assert message["usage"] == {"input_tokens": 8, "output_tokens": 1}
    assert payloads[1]["content_block"] == {"type": "text", "text": ""}
    assert "".join(p["delta"]["text"] for p in payloads[3:6]) == words(3)
    assert {p["delta"]["type"] for p in payloads[3:6]} == {"text_delta"}
    assert payloads[7]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert payloads[7]["usage"] == {"output_tokens": 3}


async def test_anthropic_stream_thinking_then_tool_use(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior = UpstreamBehavior(reasoning=True, tool_call=True)
    response = await client.post(
        "/v1/messages", json=anthropic(stream=True), headers=ANTHROPIC_HEADERS
    )
    payloads = [json.loads(data) for _, data in events(response.text)]
    starts = [p for p in payloads if p["type"] == "content_block_start"]
    assert [(s["index"], s["content_block"]["type"]) for s in starts] == [
        (0, "thinking"),
        (1, "tool_use"),
    ]
    assert starts[1]["content_block"]["name"] == "get_weather"
    deltas = [p for p in payloads if p["type"] == "content_block_delta"]
    thinking = "".join(d["delta"].get("thinking", "") for d in deltas if d["index"] == 0)
    assert thinking == words(3, "think")
    assert {"type": "signature_delta", "signature": "sig"} in [d["delta"] for d in deltas]
    partial = "".join(d["delta"]["partial_json"] for d in deltas if d["index"] == 1)
    assert json.loads(partial) == {"city": "Paris"}
    assert {d["delta"]["type"] for d in deltas if d["index"] == 1} == {"input_json_delta"}
    assert payloads[-2]["delta"]["stop_reason"] == "tool_use"
    assert [p["type"] for p in payloads].count("content_block_stop") == 2


async def test_anthropic_requires_max_tokens(client: httpx.AsyncClient) -> None:
    payload = anthropic()
    del payload["max_tokens"]
    response = await client.post("/v1/messages", json=payload, headers=ANTHROPIC_HEADERS)
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]


# --- auth and injected failures ---------------------------------------------------------------


@pytest.mark.parametrize("authorization", [None, "", "Bearer", "Basic abc"])
async def test_openai_auth_failure_shape(
    upstream: UpstreamServer, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    async with httpx.AsyncClient(base_url=upstream.url, headers=headers) as bare:
        response = await bare.post(CHAT, json=chat())
    assert response.status_code == 401
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "invalid_api_key"


@pytest.mark.parametrize("missing", ["x-api-key", "anthropic-version"])
async def test_anthropic_auth_failure_shape(client: httpx.AsyncClient, missing: str) -> None:
    headers = {k: v for k, v in ANTHROPIC_HEADERS.items() if k != missing}
    response = await client.post("/v1/messages", json=anthropic(), headers=headers)
    assert response.status_code == 401
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "authentication_error" and missing in body["error"]["message"]


async def test_fail_status_with_retry_after_in_both_shapes(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior = UpstreamBehavior(fail_status=429, retry_after="7")
    for path, payload in [(CHAT, chat()), ("/v1/embeddings", {"model": "e", "input": "x"})]:
        response = await client.post(path, json=payload)
        assert response.status_code == 429 and response.headers["retry-after"] == "7"
        assert response.json()["error"]["code"] == "rate_limit_exceeded"
    response = await client.get("/v1/models")
    assert response.status_code == 429
    response = await client.post("/v1/messages", json=anthropic(), headers=ANTHROPIC_HEADERS)
    assert response.status_code == 429 and response.headers["retry-after"] == "7"
    assert response.json()["error"]["type"] == "rate_limit_error"

    upstream.behavior = UpstreamBehavior(fail_status=529)
    response = await client.post("/v1/messages", json=anthropic(), headers=ANTHROPIC_HEADERS)
    assert response.status_code == 529 and "retry-after" not in response.headers
    assert response.json()["error"]["type"] == "overloaded_error"
    response = await client.post(CHAT, json=chat(stream=True))
    assert response.status_code == 529 and response.json()["error"]["type"] == "server_error"


async def test_unknown_path_and_wrong_method(client: httpx.AsyncClient) -> None:
    missing = await client.post("/v1/nothing", json={})
    assert missing.status_code == 404 and "error" in missing.json()
    wrong = await client.get(CHAT)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"


async def test_latency_delays_the_answer(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior.latency_s = 0.05
    for payload in (chat(), chat(stream=True)):
        start = trio.current_time()
        response = await client.post(CHAT, json=payload)
        assert response.status_code == 200
        assert trio.current_time() - start >= 0.05


async def test_hang_never_answers_until_the_client_leaves(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior.hang = True
    with pytest.raises(httpx.ReadTimeout):
        await client.post(CHAT, json=chat(), timeout=0.2)
    assert [r.path for r in upstream.requests] == [CHAT]
    await wait_until(lambda: upstream.statistics()["connections_open"] == 0)


async def test_break_after_chunks_cuts_the_stream(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior.break_after_chunks = 2
    lines: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("POST", CHAT, json=chat(stream=True)) as response:
            async for line in response.aiter_lines():
                lines.append(line)
    contents = [json.loads(x[6:])["choices"][0]["delta"] for x in lines if x.startswith("data:")]
    assert contents == [
        {"role": "assistant", "content": ""},
        {"content": "tok0 "},
        {"content": "tok1 "},
    ]
    await upstream.wait_streams_idle()
    stats = upstream.statistics()
    assert stats["streams_broken"] == 1 and stats["streams_completed"] == 0
    assert stats["streams_client_closed"] == 0


async def test_client_closing_mid_stream_is_counted(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    # Silent for an hour after the first chunk: only noticing the close itself ends the stream.
    # A raw socket: leaving httpx's streaming iterators early leaves async generators unfinalized.
    upstream.behavior = UpstreamBehavior(keepalive_gap_s=3600)
    async with await _connect(upstream) as stream:
        await stream.send_all(_raw_request(CHAT, chat(stream=True)))
        received = b""
        with trio.fail_after(5):
            while b"tok0 " not in received:
                received += await stream.receive_some()
        assert upstream.statistics()["streams_active"] == 1
    with trio.fail_after(5):
        await upstream.wait_streams_idle()
    stats = upstream.statistics()
    assert stats["streams_client_closed"] == 1
    assert stats["streams_completed"] == 0 and stats["streams_active"] == 0


async def test_keepalive_gap_pauses_after_the_first_chunk(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior = UpstreamBehavior(completion_tokens=3, keepalive_gap_s=0.2)
    seen: list[tuple[float, str]] = []
    async with client.stream("POST", CHAT, json=chat(stream=True)) as response:
        async for line in response.aiter_lines():
            if "tok" in line:
                seen.append((trio.current_time(), line))
    assert len(seen) == 3
    # Measured at the client, so allow for the first chunk arriving late on a loaded machine.
    assert seen[1][0] - seen[0][0] >= 0.15
    assert seen[2][0] - seen[1][0] < 0.15
    await upstream.wait_streams_idle()
    assert upstream.statistics()["streams_completed"] == 1


async def test_behavior_changes_apply_only_to_later_requests(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    upstream.behavior = UpstreamBehavior(completion_tokens=4, chunk_interval_s=0.01)
    async with client.stream("POST", CHAT, json=chat(stream=True)) as response:
        upstream.behavior.break_after_chunks = 1
        upstream.behavior.fail_status = 500
        body = (await response.aread()).decode()
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in openai_chunks(body)) == (
        words(4)
    )
    assert (await client.post(CHAT, json=chat())).status_code == 500


# --- HTTP/1.1 ----------------------------------------------------------------------------------


async def test_keep_alive_reuses_one_connection(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    for payload in (chat(), chat(stream=True), chat()):
        assert (await client.post(CHAT, json=payload)).status_code == 200
    stats = upstream.statistics()
    assert stats["requests_total"] == 3 and stats["connections_open"] == 1


async def test_pipelined_requests_on_a_raw_socket(upstream: UpstreamServer) -> None:
    async with await _connect(upstream) as stream:
        await stream.send_all(_raw_request(CHAT, chat(max_tokens=1)) * 3)
        received = b""
        with trio.fail_after(5):
            while received.count(b"HTTP/1.1 200 OK") < 3 or not received.endswith(b"}}"):
                received += await stream.receive_some()
    assert received.count(b'"content":"tok0 "') == 3
    assert upstream.statistics()["requests_total"] == 3


async def test_chunked_request_body(upstream: UpstreamServer, client: httpx.AsyncClient) -> None:
    encoded = json.dumps(chat(max_tokens=2)).encode()

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(encoded), 7):
            yield encoded[i : i + 7]

    response = await client.post(CHAT, content=pieces())
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == words(2)
    [recorded] = upstream.requests
    assert recorded.headers["transfer-encoding"] == "chunked"
    assert recorded.body == encoded and recorded.json() == chat(max_tokens=2)


async def test_expect_100_continue(upstream: UpstreamServer) -> None:
    request = _raw_request(
        "/v1/embeddings", {"model": "m", "input": "x"}, "expect: 100-continue\r\n"
    )
    head, body = request.split(b"\r\n\r\n")
    async with await _connect(upstream) as stream:
        await stream.send_all(head + b"\r\n\r\n")
        with trio.fail_after(5):
            assert await stream.receive_some() == b"HTTP/1.1 100 Continue\r\n\r\n"
            await stream.send_all(body)
            assert (await stream.receive_some()).startswith(b"HTTP/1.1 200 OK\r\n")


async def test_malformed_request_gets_400_and_close(upstream: UpstreamServer) -> None:
    async with await _connect(upstream) as stream:
        await stream.send_all(b"NONSENSE\r\n\r\n")
        received = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some():
                received += chunk
    assert received.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"connection: close\r\n" in received and b'"invalid_request_error"' in received


async def test_requests_are_recorded_in_order(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    await client.get("/v1/models?limit=1", headers={"X-Trace": "abc"})
    await client.post("/v1/messages", json=anthropic(), headers=ANTHROPIC_HEADERS)
    first, second = upstream.requests
    assert (first.method, first.path, first.body) == ("GET", "/v1/models?limit=1", b"")
    assert first.headers["x-trace"] == "abc" and first.headers["authorization"] == "Bearer sk-test"
    assert (second.method, second.path) == ("POST", "/v1/messages")
    assert second.headers["anthropic-version"] == "2023-06-01"
    assert second.json() == anthropic()


async def test_request_log_keeps_the_latest(
    upstream: UpstreamServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "REQUEST_LOG_LIMIT", 3)
    for i in range(5):
        await client.get(f"/v1/models?n={i}")
    assert [r.path for r in upstream.requests] == [f"/v1/models?n={i}" for i in (2, 3, 4)]
    assert upstream.statistics()["requests_total"] == 5
    assert "requests_total" in repr(upstream)


# --- the CLI --------------------------------------------------------------------------------------


async def test_cli_serves_until_sigterm() -> None:
    command = [sys.executable, "-m", "bench.upstream", "--port", "0", "--completion-tokens", "3"]
    process = await trio.lowlevel.open_process(command, cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        output = b""
        with trio.fail_after(30):
            while not output.endswith(b"\n"):
                piece = await process.stdout.receive_some()
                assert piece, f"exited early: {output!r}"
                output += piece
        line = output.decode().strip()
        assert line.startswith("upstream listening on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[-1]
        async with httpx.AsyncClient(base_url=url, headers={"authorization": "Bearer k"}) as c:
            body = (await c.post(CHAT, json=chat())).json()
        assert body["choices"][0]["message"]["content"] == words(3)
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
