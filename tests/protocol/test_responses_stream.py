"""Chat completion streams into Responses events: real upstream bodies (the bench upstream's
OpenAI and Anthropic routes) through the gateway's own chat frame sources, and the official
openai SDK's `responses.stream()` accumulator reading the result."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import httpx2
import msgspec
import openai
import pytest
from openai._models import construct_type
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import (
    ParsedResponse,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseStreamEvent,
)

from actors.relay import OpenAIFrames
from bench.upstream.anthropic_routes import messages
from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.completion import TOOL_ARGUMENTS, TOOL_NAME
from bench.upstream.openai_routes import chat_completions
from bench.upstream.replies import StreamReply
from protocol.anthropic import StreamTranslator
from protocol.openai_chat import ChunkRelay, error_frame
from protocol.responses.objects import (
    FunctionCallItem,
    OutputMessage,
    OutputRefusal,
    OutputText,
    ResponseObject,
    new_response_id,
)
from protocol.responses.stream import ChatFrames, ResponseStream
from protocol.sse import DONE, SSEDecoder, SSEEvent
from protocol.usage import Usage

MODEL = "openai/gpt-4o-mini"

TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    *["response.output_text.delta"] * 3,
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]
TOOL_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    *["response.function_call_arguments.delta"] * 4,
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
]

# --- upstream bodies ---------------------------------------------------------------------------


def decode_frames(frames: Iterable[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    return [event for frame in frames for event in decoder.feed(frame)]


def openai_upstream(max_tokens: int | None = None, **behavior: Any) -> list[SSEEvent]:
    """The bench OpenAI upstream's stream for a request asking for usage."""
    chat: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hello there"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if max_tokens is not None:
        chat["max_tokens"] = max_tokens
    request = RecordedRequest(
        "POST", "/v1/chat/completions", {"authorization": "Bearer k"}, json.dumps(chat).encode()
    )
    reply = chat_completions(request, UpstreamBehavior(**behavior))
    assert isinstance(reply, StreamReply)
    return decode_frames(frame for frame, _ in reply.frames)


def anthropic_upstream(max_tokens: int = 100, **behavior: Any) -> list[SSEEvent]:
    asked = {
        "model": "claude-sonnet-4",
        "max_tokens": max_tokens,
        "stream": True,
        "messages": [{"role": "user", "content": "hello there"}],
    }
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    request = RecordedRequest("POST", "/v1/messages", headers, json.dumps(asked).encode())
    reply = messages(request, UpstreamBehavior(**behavior))
    assert isinstance(reply, StreamReply)
    return decode_frames(frame for frame, _ in reply.frames)


def chunk_events(*deltas: dict[str, Any], finish: str | None = "stop") -> list[SSEEvent]:
    """An OpenAI-compatible stream with the given deltas, a finish chunk and usage."""
    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks: list[dict[str, Any]] = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        for delta in deltas
    ]
    if finish is not None:
        chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        usage = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
        chunks.append({**head, "choices": [], "usage": usage})
    events = [SSEEvent(None, json.dumps(chunk)) for chunk in chunks]
    return [*events, SSEEvent(None, "[DONE]")] if finish is not None else events


def openai_inner() -> OpenAIFrames:
    return OpenAIFrames(ChunkRelay(model=MODEL, include_usage=True))


def anthropic_inner() -> StreamTranslator:
    return StreamTranslator(model=MODEL, include_usage=True)


def skeleton() -> ResponseObject:
    return ResponseObject(
        id=new_response_id(),
        created_at=1_700_000_000,
        model=MODEL,
        metadata={"k": "v"},
        instructions="Be brief.",
    )


def run(
    inner: ChatFrames, events: Sequence[SSEEvent], *, finish: bool = True
) -> tuple[ResponseStream, bytes]:
    """Feed every event as the relay does (then `finish()` when the answer reached its end)."""
    stream = ResponseStream(inner, skeleton())
    out: list[bytes] = []
    for event in events:
        out += stream.feed(event)
    if finish:
        out += stream.finish()
    return stream, b"".join(out)


# --- reading our output ------------------------------------------------------------------------

# The fields OpenAI's published OpenAPI description of the Responses API marks required, for each
# event this stream emits and for the objects inside them: a client generated from that
# description (or a strict validator) refuses an event without one of them.
EVENT_REQUIRED = {
    "response.created": {"type", "response", "sequence_number"},
    "response.in_progress": {"type", "response", "sequence_number"},
    "response.completed": {"type", "response", "sequence_number"},
    "response.incomplete": {"type", "response", "sequence_number"},
    "response.failed": {"type", "response", "sequence_number"},
    "response.output_item.added": {"type", "output_index", "item", "sequence_number"},
    "response.output_item.done": {"type", "output_index", "item", "sequence_number"},
    "response.content_part.added": {
        *("type", "item_id", "output_index", "content_index", "part", "sequence_number"),
    },
    "response.content_part.done": {
        *("type", "item_id", "output_index", "content_index", "part", "sequence_number"),
    },
    "response.output_text.delta": {
        *("type", "item_id", "output_index", "content_index", "delta", "sequence_number"),
        "logprobs",
    },
    "response.output_text.done": {
        *("type", "item_id", "output_index", "content_index", "text", "sequence_number"),
        "logprobs",
    },
    "response.refusal.delta": {
        *("type", "item_id", "output_index", "content_index", "delta", "sequence_number"),
    },
    "response.refusal.done": {
        *("type", "item_id", "output_index", "content_index", "refusal", "sequence_number"),
    },
    "response.function_call_arguments.delta": {
        *("type", "item_id", "output_index", "delta", "sequence_number"),
    },
    "response.function_call_arguments.done": {
        *("type", "item_id", "name", "output_index", "arguments", "sequence_number"),
    },
}
RESPONSE_REQUIRED = {
    *("id", "object", "created_at", "error", "incomplete_details", "instructions", "model"),
    *("tools", "output", "parallel_tool_calls", "metadata", "tool_choice", "temperature"),
    "top_p",
}
ITEM_REQUIRED = {
    "message": {"id", "type", "role", "content", "status"},
    "function_call": {"type", "call_id", "name", "arguments"},
}
PART_REQUIRED = {
    "output_text": {"type", "text", "annotations", "logprobs"},
    "refusal": {"type", "refusal"},
}
USAGE_REQUIRED = {
    *("input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details"),
    "total_tokens",
}


def check_required(event: dict[str, Any]) -> None:
    """`event` and everything in it carries the fields OpenAI's schema requires."""
    kind = event["type"]
    assert EVENT_REQUIRED[kind] <= event.keys(), (kind, EVENT_REQUIRED[kind] - event.keys())
    items = [event["item"]] if "item" in event else []
    parts = [event["part"]] if "part" in event else []
    if "response" in event:
        response = event["response"]
        assert RESPONSE_REQUIRED <= response.keys(), RESPONSE_REQUIRED - response.keys()
        if response["usage"] is not None:
            assert USAGE_REQUIRED <= response["usage"].keys()
        items += response["output"]
    for item in items:
        assert ITEM_REQUIRED[item["type"]] <= item.keys(), item
        parts += item.get("content", [])
    for part in parts:
        assert PART_REQUIRED[part["type"]] <= part.keys(), part


def parse(body: bytes) -> list[dict[str, Any]]:
    """Our frames as a client's SSE decoder sees them: every event named as its `type`, then
    `[DONE]` last (not returned)."""
    events = SSEDecoder().feed(body)
    assert events[-1] == SSEEvent(None, "[DONE]")
    assert body.endswith(DONE) and body.count(b"[DONE]") == 1
    payloads = []
    for event in events[:-1]:
        payload = json.loads(event.data)
        assert event.event == payload["type"]
        payloads.append(payload)
    return payloads


def check(body: bytes) -> list[dict[str, Any]]:
    """The invariants every stream keeps; returns the events."""
    events = parse(body)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    for event in events[:2]:
        assert event["response"]["status"] == "in_progress"
        assert event["response"]["output"] == []
    terminal = events[-1]
    assert terminal["type"] in ("response.completed", "response.incomplete", "response.failed")
    assert sum("response" in e for e in events) == 3
    assert len({e["response"]["id"] for e in events if "response" in e}) == 1
    added: dict[int, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    texts: dict[tuple[int, int], list[str]] = {}
    arguments: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    for event in events:
        check_required(event)
    for event in events[2:-1]:
        kind = event["type"]
        if kind == "response.output_item.added":
            assert event["output_index"] == len(added)
            assert event["item"]["status"] == "in_progress"
            added[event["output_index"]] = event["item"]
            continue
        index = event["output_index"]
        assert index in added and index not in done, kind
        item = added[index]
        if kind == "response.output_item.done":
            assert event["item"]["id"] == item["id"] and event["item"]["type"] == item["type"]
            assert event["item"]["status"] in ("completed", "incomplete")
            done[index] = event["item"]
            continue
        assert event["item_id"] == item["id"]
        if kind == "response.output_text.delta":
            texts.setdefault((index, event["content_index"]), []).append(event["delta"])
            assert event["logprobs"] == []
        elif kind == "response.output_text.done":
            assert "".join(texts.get((index, event["content_index"]), [])) == event["text"]
        elif kind == "response.function_call_arguments.delta":
            arguments.setdefault(index, []).append(event["delta"])
        elif kind == "response.function_call_arguments.done":
            assert "".join(arguments.get(index, [])) == event["arguments"]
            names[index] = event["name"]
    assert done.keys() == added.keys()
    assert names == {i: item["name"] for i, item in done.items() if item["type"] == "function_call"}
    assert terminal["response"]["output"] == [done[i] for i in sorted(done)]
    return events


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


class SDKRun(msgspec.Struct):
    types: list[str]
    events: list[Any]
    final: ParsedResponse[Any] | None


def sdk_stream(body: bytes) -> SDKRun:
    """The official SDK's `client.responses.stream()` reading `body` as the HTTP answer, its
    models validated strictly."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = openai.OpenAI(
        api_key="sk-test",
        base_url="http://gateway.test/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
        _strict_response_validation=True,
        max_retries=0,
    )
    with client.responses.stream(model=MODEL, input="hello there") as stream:
        events = list(stream)
        final = stream._state._completed_response
    return SDKRun([e.type for e in events], events, final)


# --- whole answers -----------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["openai", "anthropic"])
def test_text_answer_full_event_sequence(source: str) -> None:
    if source == "openai":
        inner: ChatFrames = openai_inner()
        upstream = openai_upstream(completion_tokens=3)
    else:
        inner = anthropic_inner()
        upstream = anthropic_upstream(completion_tokens=3)
    stream, body = run(inner, upstream)
    events = check(body)
    assert types(events) == TEXT_EVENTS
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert deltas == ["tok0 ", "tok1 ", "tok2 "]
    added = events[2]["item"]
    assert added == {
        "type": "message",
        "id": added["id"],
        "status": "in_progress",
        "content": [],
        "role": "assistant",
    }
    assert events[3]["part"] == {
        "type": "output_text",
        "text": "",
        "annotations": [],
        "logprobs": [],
    }
    completed = events[-1]["response"]
    assert completed["status"] == "completed"
    assert completed["usage"]["input_tokens"] == 5 and completed["usage"]["output_tokens"] == 3
    assert completed["usage"]["total_tokens"] == 8
    assert completed["metadata"] == {"k": "v"} and completed["instructions"] == "Be brief."
    # the stored response is the completed one; usage is the inner source's (for billing)
    assert (
        stream.response.status == "completed" and stream.response.output_text == "tok0 tok1 tok2 "
    )
    assert stream.usage == Usage.of(5, 3) and stream.finished and stream.ended
    sdk = sdk_stream(body)
    assert sdk.types == TEXT_EVENTS
    assert sdk.final is not None
    assert sdk.final.output_text == "tok0 tok1 tok2 " and sdk.final.status == "completed"
    assert sdk.final.usage is not None and sdk.final.usage.output_tokens == 3


@pytest.mark.parametrize("source", ["openai", "anthropic"])
def test_tool_call_round_trip(source: str) -> None:
    if source == "openai":
        inner: ChatFrames = openai_inner()
        upstream = openai_upstream(tool_call=True)
        call_id = next(
            json.loads(e.data)["choices"][0]["delta"]["tool_calls"][0]["id"]
            for e in upstream
            if '"tool_calls":[{"index":0,"id"' in e.data
        )
    else:
        inner = anthropic_inner()
        upstream = anthropic_upstream(tool_call=True)
        call_id = next(
            json.loads(e.data)["content_block"]["id"]
            for e in upstream
            if e.event == "content_block_start"
        )
    stream, body = run(inner, upstream)
    events = check(body)
    assert types(events) == TOOL_EVENTS
    added = events[2]["item"]
    assert added["type"] == "function_call" and added["arguments"] == ""
    assert added["call_id"] == call_id and added["name"] == TOOL_NAME
    assert added["id"].startswith("fc_")
    assert events[-3]["arguments"] == TOOL_ARGUMENTS
    final = stream.response
    assert final.output == [
        FunctionCallItem(
            id=added["id"],
            call_id=call_id,
            name=TOOL_NAME,
            arguments=TOOL_ARGUMENTS,
            status="completed",
        )
    ]
    sdk = sdk_stream(body)
    assert sdk.final is not None
    (call,) = sdk.final.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert (call.call_id, call.name, call.arguments) == (call_id, TOOL_NAME, TOOL_ARGUMENTS)


@pytest.mark.parametrize("source", ["openai", "anthropic"])
def test_reasoning_is_not_forwarded(source: str) -> None:
    if source == "openai":
        inner: ChatFrames = openai_inner()
        upstream = openai_upstream(completion_tokens=2, reasoning=True)
    else:
        inner = anthropic_inner()
        upstream = anthropic_upstream(completion_tokens=2, reasoning=True)
    assert any("think0" in e.data for e in upstream)
    _, body = run(inner, upstream)
    assert b"think" not in body
    events = check(body)
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "tok0 tok1 "


@pytest.mark.parametrize("source", ["openai", "anthropic"])
def test_length_ends_incomplete(source: str) -> None:
    if source == "openai":
        inner: ChatFrames = openai_inner()
        upstream = openai_upstream(max_tokens=2, completion_tokens=10)
    else:
        inner = anthropic_inner()
        upstream = anthropic_upstream(max_tokens=2, completion_tokens=10)
    stream, body = run(inner, upstream)
    events = check(body)
    terminal = events[-1]
    assert terminal["type"] == "response.incomplete"
    assert terminal["response"]["status"] == "incomplete"
    assert terminal["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert terminal["response"]["output"][0]["status"] == "incomplete"
    assert terminal["response"]["usage"]["output_tokens"] == 2
    assert stream.response.status == "incomplete"
    sdk = sdk_stream(body)
    assert sdk.types[-1] == "response.incomplete" and sdk.final is None
    response = sdk.events[-1].response
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "tok0 tok1 "


def test_content_filter_ends_incomplete() -> None:
    _, body = run(openai_inner(), chunk_events({"content": "Some"}, finish="content_filter"))
    terminal = check(body)[-1]
    assert terminal["type"] == "response.incomplete"
    assert terminal["response"]["incomplete_details"] == {"reason": "content_filter"}


def test_parallel_tool_calls_interleaved_by_index() -> None:
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, **fields}]}

    def args(index: int, text: str) -> dict[str, Any]:
        return call(index, function={"arguments": text})

    upstream = chunk_events(
        call(0, id="call_a", type="function", function={"name": "alpha", "arguments": ""}),
        call(1, id="call_b", type="function", function={"name": "beta", "arguments": '{"b"'}),
        args(0, '{"a"'),
        args(1, ": 2}"),
        args(0, ": 1}"),
        {"tool_calls": [{"index": 0, "function": {"arguments": " "}}, *args(1, " ")["tool_calls"]]},
        finish="tool_calls",
    )
    stream, body = run(openai_inner(), upstream)
    events = check(body)
    deltas = [
        (e["output_index"], e["delta"])
        for e in events
        if e["type"] == "response.function_call_arguments.delta"
    ]
    assert deltas == [(1, '{"b"'), (0, '{"a"'), (1, ": 2}"), (0, ": 1}"), (0, " "), (1, " ")]
    output = stream.response.output
    assert [(i.call_id, i.name, i.arguments) for i in output] == [  # type: ignore[union-attr]
        ("call_a", "alpha", '{"a": 1} '),
        ("call_b", "beta", '{"b": 2} '),
    ]
    sdk = sdk_stream(body)
    assert sdk.final is not None
    calls = sdk.final.output
    assert [(c.call_id, c.arguments) for c in calls] == [  # type: ignore[union-attr]
        ("call_a", '{"a": 1} '),
        ("call_b", '{"b": 2} '),
    ]


def test_text_then_tool_call_in_one_answer() -> None:
    upstream = chunk_events(
        {"role": "assistant", "content": ""},
        {"content": "Let me "},
        {"content": "check."},
        {
            "tool_calls": [
                {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}
            ]
        },
        finish="tool_calls",
    )
    stream, body = run(openai_inner(), upstream)
    events = check(body)
    assert types(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    message, call = stream.response.output
    assert isinstance(message, OutputMessage) and isinstance(call, FunctionCallItem)
    assert message.content == [OutputText("Let me check.")]
    assert call.call_id == "call_1" and call.arguments == "{}"
    assert stream.response.usage is not None and stream.response.usage.total_tokens == 13
    sdk = sdk_stream(body)
    assert sdk.final is not None and sdk.final.output_text == "Let me check."
    assert isinstance(sdk.final.output[0], ResponseOutputMessage)
    assert isinstance(sdk.final.output[1], ResponseFunctionToolCall)


def test_refusal_streams_as_a_refusal_part() -> None:
    upstream = chunk_events({"content": None, "refusal": "I can't "}, {"refusal": "help."})
    stream, body = run(openai_inner(), upstream)
    events = check(body)
    assert "response.refusal.delta" in types(events)
    done = next(e for e in events if e["type"] == "response.refusal.done")
    assert done["refusal"] == "I can't help."
    (message,) = stream.response.output
    assert isinstance(message, OutputMessage)
    assert message.content == [OutputRefusal("I can't help.")]
    sdk = sdk_stream(body)
    assert sdk.final is not None
    parsed = sdk.final.output[0]
    assert isinstance(parsed, ResponseOutputMessage)
    part = parsed.content[0]
    assert isinstance(part, ResponseOutputRefusal) and part.refusal == "I can't help."


def test_empty_answer_completes_with_no_items() -> None:
    stream, body = run(openai_inner(), chunk_events({"role": "assistant", "content": ""}))
    events = check(body)
    assert types(events) == ["response.created", "response.in_progress", "response.completed"]
    assert events[-1]["response"]["output"] == []
    assert stream.response.output == []
    sdk = sdk_stream(body)
    assert sdk.final is not None and sdk.final.output == []


def test_events_split_over_many_feeds_and_unicode() -> None:
    fragments = ["héllo ", "wörld ", "😀", "\n", '"quoted"', "\\"]
    upstream = chunk_events(*({"content": f} for f in fragments))
    stream, body = run(openai_inner(), upstream)
    check(body)
    assert stream.response.output_text == "".join(fragments)
    sdk = sdk_stream(body)
    assert sdk.final is not None and sdk.final.output_text == "".join(fragments)


def test_a_long_answer_is_assembled_exactly() -> None:
    fragments = [f"w{i} " for i in range(20_000)]
    upstream = chunk_events(*({"content": f} for f in fragments))
    stream, body = run(openai_inner(), upstream)
    events = check(body)
    assert len(events) == 20_000 + 8
    assert stream.response.output_text == "".join(fragments)


def test_other_choices_and_chunks_after_the_finish_are_ignored() -> None:
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [
        {**head, "choices": [{"index": 1, "delta": {"content": "other"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"content": "mine"}, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [{"index": 0, "delta": {"content": "late"}, "finish_reason": None}]},
    ]
    stream, body = run(openai_inner(), [SSEEvent(None, json.dumps(c)) for c in chunks])
    check(body)
    assert stream.response.output_text == "mine"


def test_a_call_without_an_id_gets_one_and_a_late_name() -> None:
    upstream = chunk_events(
        {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]},
        {"tool_calls": [{"index": 0, "function": {"name": "late", "arguments": "}"}}]},
        finish="tool_calls",
    )
    stream, body = run(openai_inner(), upstream)
    events = check(body)
    added = events[2]["item"]
    (call,) = stream.response.output
    assert isinstance(call, FunctionCallItem)
    assert call.call_id == added["call_id"] and call.call_id.startswith("call_")
    assert call.name == "late" and call.arguments == "{}"
    assert sdk_stream(body).final is not None


# --- the SDK's accumulator, driven event by event -----------------------------------------------


def test_sdk_stream_state_assembles_the_final_response() -> None:
    _, body = run(openai_inner(), openai_upstream(completion_tokens=5, tokens_per_chunk=2))
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=[], text_format=openai.omit)
    snapshots = []
    for payload in parse(body):
        event = construct_type(type_=ResponseStreamEvent, value=payload)
        for fired in state.handle_event(event):  # type: ignore[arg-type]
            if fired.type == "response.output_text.delta":
                snapshots.append(fired.snapshot)
    assert snapshots == ["tok0 tok1 ", "tok0 tok1 tok2 tok3 ", "tok0 tok1 tok2 tok3 tok4 "]
    final = state._completed_response
    assert final is not None and final.output_text == "tok0 tok1 tok2 tok3 tok4 "


# --- broken streams ----------------------------------------------------------------------------


def failed(body: bytes) -> dict[str, Any]:
    events = check(body)
    terminal = events[-1]
    assert terminal["type"] == "response.failed"
    assert terminal["response"]["status"] == "failed"
    error = terminal["response"]["error"]
    assert error["code"] == "server_error" and error["message"]
    sdk = sdk_stream(body)  # the SDK reads it to the end without raising
    assert sdk.types[-1] == "response.failed" and sdk.final is None
    return terminal["response"]  # type: ignore[no-any-return]


def test_nothing_fed_finish_fails_as_ended_early() -> None:
    stream, body = run(openai_inner(), [])
    response = failed(body)
    assert types(check(body)) == ["response.created", "response.in_progress", "response.failed"]
    assert "ended before" in response["error"]["message"]
    assert stream.response.status == "failed"


@pytest.mark.parametrize("source", ["openai", "anthropic"])
def test_stream_cut_before_its_finish_fails_with_items_incomplete(source: str) -> None:
    if source == "openai":
        inner: ChatFrames = openai_inner()
        upstream = openai_upstream(completion_tokens=6)[:4]
    else:
        inner = anthropic_inner()
        upstream = anthropic_upstream(completion_tokens=6)[:6]
    stream = ResponseStream(inner, skeleton())
    out: list[bytes] = []
    for event in upstream:
        out += stream.feed(event)
    assert not stream.finished  # the relay would call it "ended early"
    out += stream.finish()
    response = failed(b"".join(out))
    (message,) = response["output"]
    assert message["status"] == "incomplete" and message["content"][0]["text"].startswith("tok0")
    assert stream.response.output[0].status == "incomplete"


def test_caller_fail_after_some_text() -> None:
    stream = ResponseStream(openai_inner(), skeleton())
    out: list[bytes] = []
    for event in openai_upstream(completion_tokens=6)[:3]:
        out += stream.feed(event)
    assert stream.response.status == "in_progress"  # a snapshot before the end
    assert stream.response.output_text == "tok0 tok1 "
    out += stream.fail("The upstream provider 'p' failed mid-stream; retry the request.")
    assert stream.finished and stream.ended
    assert (
        stream.fail("again") == []
        and stream.finish() == []
        and stream.feed(SSEEvent(None, "{}")) == []
    )
    response = failed(b"".join(out))
    assert "mid-stream" in response["error"]["message"]
    assert stream.response.error is not None and stream.response.error.code == "server_error"


def test_anthropic_error_event_fails_the_stream() -> None:
    upstream = anthropic_upstream(completion_tokens=6)[:5]
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    upstream.append(SSEEvent("error", json.dumps(error)))
    upstream += anthropic_upstream(completion_tokens=2)  # anything after is ignored
    stream, body = run(anthropic_inner(), upstream, finish=False)
    assert stream.finished  # nothing more to wait for: the relay then calls finish()
    assert stream.finish() == []
    response = failed(body)
    assert "Overloaded" in response["error"]["message"]


def test_openai_error_object_mid_stream_fails_the_stream() -> None:
    upstream = chunk_events({"content": "Hel"}, finish=None)
    upstream.append(SSEEvent(None, json.dumps({"error": {"message": "model crashed"}})))
    _, body = run(openai_inner(), upstream)
    assert "model crashed" in failed(body)["error"]["message"]


class Scripted:
    """A chat frame source answering each feed with the next scripted frames (for frames no
    real source makes on its own, such as the relay's error frame)."""

    def __init__(self, *script: list[bytes]) -> None:
        self._script = list(script)
        self.usage: Usage | None = None
        self.finished = False

    def feed(self, event: SSEEvent) -> list[bytes]:
        return self._script.pop(0) if self._script else []

    def finish(self) -> list[bytes]:
        return [DONE]


def test_an_error_frame_from_the_inner_source_fails_the_stream() -> None:
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n'
    broken = error_frame("The upstream timed out.", code="upstream_timeout")
    inner = Scripted([chunk], [broken, DONE])
    _, body = run(inner, [SSEEvent(None, "x"), SSEEvent(None, "y")])
    response = failed(body)
    assert response["error"]["message"] == "The upstream timed out."
    assert response["output"][0]["content"][0]["text"] == "Hi"


HOSTILE_CHUNKS = [
    "not json",
    "{",
    '"a string"',
    "[1, 2]",
    '{"choices": 5}',
    '{"choices": [5]}',
    '{"choices": [{"index": "0", "delta": {"content": "x"}}]}',
    '{"choices": [{"index": 0, "delta": {"content": 5}}]}',
    '{"choices": [{"index": 0, "delta": {"content": ["x"]}}]}',
    '{"choices": [{"index": 0, "delta": {"refusal": {}}}]}',
    '{"choices": [{"index": 0, "delta": {"tool_calls": {}}}]}',
    '{"choices": [{"index": 0, "delta": {"tool_calls": [5]}}]}',
    '{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "a"}]}}]}',
    '{"choices": [{"index": 0, "delta": {"tool_calls": [{"id": 5}]}}]}',
    '{"choices": [{"index": 0, "delta": {"tool_calls": [{"function": "f"}]}}]}',
    '{"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"arguments": 1}}]}}]}',
    '{"choices": [{"index": 0, "delta": {}, "finish_reason": 7}]}',
    '{"choices": [{"index": 0, "delta": {"content": "x", "extra": ' + "[" * 5000 + "}}]}",
    '{"choices": [], "usage": ' + '{"a":' * 5000 + "}",
]


@pytest.mark.parametrize("payload", HOSTILE_CHUNKS)
def test_hostile_openai_chunks_fail_the_stream_never_raise(payload: str) -> None:
    upstream = chunk_events({"content": "ok "}, finish=None)
    upstream += [SSEEvent(None, payload), *chunk_events({"content": "after"})]
    stream, body = run(openai_inner(), upstream)
    response = failed(body)
    assert stream.finished and stream.response.status == "failed"
    assert "after" not in json.dumps(response)


HOSTILE_ANTHROPIC = [
    "not json",
    '{"type": "content_block_delta", "index": "x", "delta": {}}',
    '{"type": "content_block_start", "index": 1}',
    '{"type": "message_delta", "delta": 5}',
    '{"type": "ping", "x": ' + "[" * 5000 + "}",
]


@pytest.mark.parametrize("payload", HOSTILE_ANTHROPIC)
def test_hostile_anthropic_events_fail_the_stream_never_raise(payload: str) -> None:
    upstream = anthropic_upstream(completion_tokens=4)
    upstream.insert(4, SSEEvent("x", payload))
    stream, body = run(anthropic_inner(), upstream)
    failed(body)
    assert stream.finished


def test_unknown_anthropic_events_are_skipped() -> None:
    upstream = anthropic_upstream(completion_tokens=3)
    upstream.insert(4, SSEEvent("future", '{"type": "future_event", "x": 1}'))
    stream, body = run(anthropic_inner(), upstream)
    assert check(body)[-1]["type"] == "response.completed"
    assert stream.response.output_text == "tok0 tok1 tok2 "


def anthropic_event(payload: dict[str, Any]) -> SSEEvent:
    return SSEEvent(payload["type"], json.dumps(payload))


def test_anthropic_text_then_two_tool_uses() -> None:
    def block_delta(index: int, **delta: str) -> SSEEvent:
        return anthropic_event({"type": "content_block_delta", "index": index, "delta": delta})

    def tool(index: int, tool_id: str, name: str) -> SSEEvent:
        block = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
        return anthropic_event(
            {"type": "content_block_start", "index": index, "content_block": block}
        )

    usage = {"input_tokens": 12, "output_tokens": 1}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "usage": usage}
    upstream = [
        anthropic_event({"type": "message_start", "message": message}),
        anthropic_event(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        ),
        block_delta(0, type="text_delta", text="Checking "),
        block_delta(0, type="text_delta", text="both."),
        anthropic_event({"type": "content_block_stop", "index": 0}),
        tool(1, "toolu_a", "weather"),
        block_delta(1, type="input_json_delta", partial_json='{"city":'),
        block_delta(1, type="input_json_delta", partial_json=' "Paris"}'),
        anthropic_event({"type": "content_block_stop", "index": 1}),
        tool(2, "toolu_b", "time"),
        block_delta(2, type="input_json_delta", partial_json="{}"),
        anthropic_event({"type": "content_block_stop", "index": 2}),
        anthropic_event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 30},
            }
        ),
        anthropic_event({"type": "message_stop"}),
    ]
    stream, body = run(anthropic_inner(), upstream)
    events = check(body)
    assert events[-1]["type"] == "response.completed"
    assert stream.deltas == 5
    message_item, first, second = stream.response.output
    assert isinstance(message_item, OutputMessage)
    assert message_item.content == [OutputText("Checking both.")]
    assert isinstance(first, FunctionCallItem) and isinstance(second, FunctionCallItem)
    assert (first.call_id, first.name, first.arguments) == (
        "toolu_a",
        "weather",
        '{"city": "Paris"}',
    )
    assert (second.call_id, second.name, second.arguments) == ("toolu_b", "time", "{}")
    assert stream.response.usage is not None
    assert (stream.response.usage.input_tokens, stream.response.usage.output_tokens) == (12, 30)
    sdk = sdk_stream(body)
    assert sdk.final is not None and sdk.final.output_text == "Checking both."
    assert [getattr(i, "call_id", None) for i in sdk.final.output] == [None, "toolu_a", "toolu_b"]


def test_the_clock_stamps_completed_at() -> None:
    stream = ResponseStream(openai_inner(), skeleton(), clock=lambda: 1_700_000_009.7)
    out: list[bytes] = []
    for event in openai_upstream(completion_tokens=2):
        out += stream.feed(event)
    out += stream.finish()
    assert check(b"".join(out))[-1]["response"]["completed_at"] == 1_700_000_009
    assert stream.response.completed_at == 1_700_000_009
    broken = ResponseStream(openai_inner(), skeleton(), clock=lambda: 5.0)
    assert failed(b"".join(broken.finish()))["completed_at"] is None
