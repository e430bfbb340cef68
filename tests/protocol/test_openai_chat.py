"""The OpenAI chat wire format: request parsing and byte-preserving rewrites, and `ChunkRelay`."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from protocol.errors import APIError, UpstreamMalformed
from protocol.openai_chat import (
    ChunkRelay,
    error_frame,
    parse_chat_request,
    rewrite_model_in_object,
    rewrite_request,
)
from protocol.sse import DONE
from protocol.usage import Usage

MODEL = "openai/gpt-4o-mini"


def frame_json(frame: bytes) -> Any:
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    assert b"\n" not in frame[:-2]
    return msgspec.json.decode(frame[6:-2])


# --- parse_chat_request ------------------------------------------------------------------------


def test_parse_reads_the_gateway_fields_and_ignores_the_rest() -> None:
    request = parse_chat_request(
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,'
        b'"stream_options":{"include_usage":true,"x":1},"max_tokens":10,'
        b'"max_completion_tokens":20,"metadata":{"idempotency_key":"k"},"logit_bias":{"1":2}}'
    ).request
    assert request.model == "m" and request.stream is True
    assert request.stream_options is not None and request.stream_options.include_usage
    assert request.include_usage is True
    assert (request.max_tokens, request.max_completion_tokens, request.output_limit) == (10, 20, 20)
    assert request.metadata == {"idempotency_key": "k"}


def test_parse_defaults() -> None:
    request = parse_chat_request(
        b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    ).request
    assert (request.stream, request.stream_options, request.metadata) == (False, None, None)
    assert request.include_usage is False and request.output_limit is None


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"messages":[{"role":"user"}]}', "model"),
        (b'{"model":"","messages":[{"role":"user"}]}', "model"),
        (b'{"model":3,"messages":[{"role":"user"}]}', "model"),
        (b'{"model":"m"}', "messages"),
        (b'{"model":"m","messages":[]}', "messages"),
        (b'{"model":"m","messages":[ \n ]}', "messages"),
        (b'{"model":"m","messages":{"role":"user"}}', "messages"),
        (b'{"model":"m","messages":null}', "messages"),
        (b'{"model":"m","messages":[{}],"stream":"yes"}', "stream"),
        (
            b'{"model":"m","messages":[{}],"stream_options":{"include_usage":1}}',
            "stream_options.include_usage",
        ),
        (b'{"model":"m","messages":[{}],"max_tokens":0}', "max_tokens"),
        (b'{"model":"m","messages":[{}],"metadata":{"a":1}}', "metadata"),
    ],
)
def test_parse_rejects_with_the_param(body: bytes, param: str) -> None:
    with pytest.raises(APIError) as info:
        parse_chat_request(body)
    assert (info.value.status, info.value.param) == (400, param)


@pytest.mark.parametrize("body", [b"", b"not json", b"[1]", b'{"model":"m"'])
def test_parse_rejects_non_objects(body: bytes) -> None:
    with pytest.raises(APIError) as info:
        parse_chat_request(body)
    assert info.value.status == 400


# --- rewrites ----------------------------------------------------------------------------------

BODY = (
    b'{ "model" : "openai/gpt-4o-mini",\n'
    b'  "messages": [ {"role": "user", "content": "caf\\u00e9 \xc3\xa9"} ],\n'
    b'  "temperature": 0.70, "stream": true,\n'
    b'  "stream_options": {"include_usage": false, "continuous_usage_stats": true},\n'
    b'  "tools": [ {"type": "function", "function": {"name": "f", "parameters": {}}} ] }'
)


def test_rewrite_changes_model_and_include_usage_only() -> None:
    out = rewrite_request(BODY, model="gpt-4o-mini", force_include_usage=True)
    assert out == (
        b'{"model":"gpt-4o-mini",'
        b'"messages":[ {"role": "user", "content": "caf\\u00e9 \xc3\xa9"} ],'
        b'"temperature":0.70,"stream":true,'
        b'"stream_options":{"include_usage":true,"continuous_usage_stats":true},'
        b'"tools":[ {"type": "function", "function": {"name": "f", "parameters": {}}} ]}'
    )


def test_rewrite_without_forcing_keeps_stream_options() -> None:
    out = rewrite_request(BODY, model="x", force_include_usage=False)
    assert b'"stream_options":{"include_usage": false, "continuous_usage_stats": true}' in out
    assert out.startswith(b'{"model":"x","messages":[ {"role"')


def test_rewrite_adds_stream_options_when_absent_or_null() -> None:
    for body in (
        b'{"model":"a","stream":true}',
        b'{"model":"a","stream":true,"stream_options":null}',
    ):
        out = rewrite_request(body, model="b", force_include_usage=True)
        assert msgspec.json.decode(out)["stream_options"] == {"include_usage": True}


def test_rewrite_leaves_non_streaming_requests_alone() -> None:
    out = rewrite_request(b'{"stream": false, "model":"a"}', model="b", force_include_usage=True)
    assert out == b'{"stream":false,"model":"b"}'


def test_rewrite_escapes_the_model() -> None:
    out = rewrite_request(b'{"model":"a"}', model='we"ird', force_include_usage=False)
    assert msgspec.json.decode(out) == {"model": 'we"ird'}


def test_a_parsed_request_is_rewritten_without_decoding_its_body_again() -> None:
    parsed = parse_chat_request(
        BODY.replace(b'"tools"', b'"messages2"', 1).replace(
            b'"stream_options"', b'"metadata": {"idempotency_key": "k", "a": "b"}, "stream_options"'
        )
    )
    assert parsed.request.stream and parsed.request.metadata == {"idempotency_key": "k", "a": "b"}
    out = parsed.rewrite(model="gpt-4o-mini", force_include_usage=True)
    assert out.startswith(b'{"model":"gpt-4o-mini","messages":[ {"role": "user"')
    decoded = msgspec.json.decode(out)
    assert decoded["metadata"] == {"a": "b"}  # the gateway's idempotency key is consumed
    assert decoded["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    # Rewriting twice (a retry on another deployment) starts from the client's fields again.
    again = parsed.rewrite(model="other", force_include_usage=False)
    assert msgspec.json.decode(again)["model"] == "other"
    assert b'"idempotency_key"' not in again


def test_parse_rejects_a_missing_model_with_its_param() -> None:
    with pytest.raises(APIError) as info:
        parse_chat_request(b'{"messages":[{"role":"user"}]}')
    assert info.value.param == "model"
    assert "missing required field `model`" in info.value.message


def test_rewrite_rejects_non_objects() -> None:
    with pytest.raises(APIError):
        rewrite_request(b"[]", model="b", force_include_usage=True)


def test_rewrite_model_in_a_completion_and_read_its_usage() -> None:
    body = (
        b'{"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini-2024-07-18",'
        b' "choices": [ {"index": 0, "message": {"role": "assistant", "content": "hi"}} ],'
        b' "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11,'
        b' "prompt_tokens_details": {"cached_tokens": 0}}}'
    )
    out, usage = rewrite_model_in_object(body, MODEL)
    assert usage == Usage(9, 2, 11)
    assert out == (
        b'{"id":"chatcmpl-1","object":"chat.completion","model":"openai/gpt-4o-mini",'
        b'"choices":[ {"index": 0, "message": {"role": "assistant", "content": "hi"}} ],'
        b'"usage":{"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11,'
        b' "prompt_tokens_details": {"cached_tokens": 0}}}'
    )


def test_rewrite_model_in_an_embeddings_list() -> None:
    body = b'{"object":"list","data":[],"model":"e","usage":{"prompt_tokens":5,"total_tokens":5}}'
    out, usage = rewrite_model_in_object(body, "openai/e")
    assert usage == Usage(5, 0, 5)
    assert msgspec.json.decode(out)["model"] == "openai/e"
    assert rewrite_model_in_object(b'{"model":"e"}', "m")[1] is None


@pytest.mark.parametrize("body", [b"<html>", b"[1,2]", b""])
def test_rewrite_model_rejects_a_broken_upstream_body(body: bytes) -> None:
    with pytest.raises(UpstreamMalformed):
        rewrite_model_in_object(body, "m")


# --- ChunkRelay --------------------------------------------------------------------------------


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    body: dict[str, Any] = {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1717000000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    body.update(extra)
    return msgspec.json.encode(body).decode()


TOOL_CALL = {
    "index": 0,
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": ""},
}
UPSTREAM = [
    chunk({"role": "assistant", "content": ""}, usage=None),
    chunk({"role": "assistant", "reasoning_content": "Think"}, usage=None),
    chunk({"role": "assistant", "content": "Hel"}, usage=None),
    chunk({"content": "lo"}, usage=None),
    chunk({"tool_calls": [TOOL_CALL]}, usage=None),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":"Paris"}'}}]}),
    chunk({}, "tool_calls", usage=None),
    msgspec.json.encode(
        {
            "id": "chatcmpl-up",
            "object": "chat.completion.chunk",
            "created": 1717000000,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
        }
    ).decode(),
    "[DONE]",
]


def relay_all(relay: ChunkRelay, payloads: list[str]) -> list[bytes]:
    frames: list[bytes] = []
    for payload in payloads:
        frames.extend(relay.feed(payload))
    return frames + relay.finish()


def test_relay_normalizes_a_realistic_stream_without_usage() -> None:
    relay = ChunkRelay(model=MODEL, include_usage=False)
    frames = relay_all(relay, UPSTREAM)
    assert frames[-1] == DONE
    chunks = [frame_json(frame) for frame in frames[:-1]]
    assert len(chunks) == 7
    for c in chunks:
        assert (c["id"], c["object"], c["created"], c["model"]) == (
            "chatcmpl-up",
            "chat.completion.chunk",
            1717000000,
            MODEL,
        )
        assert c["system_fingerprint"] == "fp_1" and "usage" not in c
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert all("role" not in d for d in deltas[1:])
    assert deltas[1] == {"reasoning": "Think"}
    assert deltas[2] == {"content": "Hel"}
    assert deltas[4] == {"tool_calls": [TOOL_CALL]}
    assert deltas[5]["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]
    assert reasons == [None] * 6 + ["tool_calls"]
    assert relay.usage == Usage(12, 7, 19)
    assert relay.finished and relay.saw_done


def test_relay_sends_usage_just_before_done_when_asked() -> None:
    relay = ChunkRelay(model=MODEL, include_usage=True)
    frames = relay_all(relay, UPSTREAM)
    assert len(frames) == 9 and frames[-1] == DONE
    assert frames[-2] == (
        b'data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1717000000,'
        b'"model":"openai/gpt-4o-mini","choices":[],'
        b'"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}\n\n'
    )
    assert all("usage" not in frame_json(f) for f in frames[:-2])
    assert relay.finish() == []


def test_relay_first_frame_is_byte_exact() -> None:
    relay = ChunkRelay(model=MODEL, include_usage=False)
    assert relay.feed(UPSTREAM[0]) == [
        b'data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1717000000,'
        b'"model":"openai/gpt-4o-mini","system_fingerprint":"fp_1","choices":[{"index":0,'
        b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
    ]


def test_relay_generates_a_missing_id_and_keeps_it() -> None:
    relay = ChunkRelay(model=MODEL, include_usage=True)
    payloads = [
        '{"choices":[{"index":0,"delta":{"content":"a"}}]}',
        '{"id":"later-id","choices":[{"index":0,"delta":{"content":"b"}}]}',
        '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
        '"usage":{"prompt_tokens":1,"completion_tokens":2}}',
    ]
    chunks = [frame_json(f) for f in relay_all(relay, payloads)[:-1]]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and re.fullmatch(r"chatcmpl-[A-Za-z0-9]{24}", ids.pop())
    assert len({c["created"] for c in chunks}) == 1
    assert chunks[0]["choices"][0] == {
        "index": 0,
        "delta": {"role": "assistant", "content": "a"},
        "finish_reason": None,
    }
    # usage on a content chunk is captured, stripped there and sent in its own chunk
    assert "usage" not in chunks[2]
    assert chunks[3]["choices"] == [] and chunks[3]["usage"] == {
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "total_tokens": 3,
    }


def test_relay_keeps_reasoning_when_both_spellings_arrive() -> None:
    relay = ChunkRelay(model=MODEL, include_usage=False)
    (frame,) = relay.feed(chunk({"reasoning": "r", "reasoning_content": "r"}))
    assert frame_json(frame)["choices"][0]["delta"] == {"role": "assistant", "reasoning": "r"}


def test_relay_keeps_one_role_per_choice_index() -> None:
    relay = ChunkRelay(model=MODEL, include_usage=False)
    payload = (
        '{"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":"a"}},'
        '{"index":1,"delta":{"role":"assistant","content":"b"}}]}'
    )
    first = frame_json(relay.feed(payload)[0])["choices"]
    again = frame_json(relay.feed(payload)[0])["choices"]
    assert [c["delta"].get("role") for c in first] == ["assistant", "assistant"]
    assert [c["delta"] for c in again] == [{"content": "a"}, {"content": "b"}]


def test_relay_maps_foreign_finish_reasons() -> None:
    relay = ChunkRelay(model=MODEL, include_usage=False)
    (frame,) = relay.feed(chunk({}, "eos"))
    assert frame_json(frame)["choices"][0]["finish_reason"] == "stop"


def test_relay_drops_empty_chunks_and_ignores_data_after_done() -> None:
    relay = ChunkRelay(model=MODEL, include_usage=True)
    assert relay.feed('{"id":"","choices":[],"prompt_filter_results":[]}') == []
    assert relay.feed("[DONE]") == [] and relay.saw_done
    assert relay.feed(chunk({"content": "late"})) == []
    # nothing captured: no usage chunk, only the end
    assert relay.finish() == [DONE] and relay.usage is None and not relay.finished


def test_relay_sends_a_usage_estimate_set_by_the_caller() -> None:
    relay = ChunkRelay(model=MODEL, include_usage=True)
    relay.feed(chunk({"content": "a"}, "stop"))
    relay.usage = Usage.of(3, 1)
    assert frame_json(relay.finish()[0])["usage"]["total_tokens"] == 4


@pytest.mark.parametrize(
    "payload",
    ["not json", "[1]", '{"choices":{}}', '{"choices":["x"]}', '{"choices":[{"index":"0"}]}'],
)
def test_relay_rejects_protocol_violations(payload: str) -> None:
    with pytest.raises(UpstreamMalformed):
        ChunkRelay(model=MODEL, include_usage=False).feed(payload)


def test_relay_raises_an_upstream_error_object() -> None:
    relay = ChunkRelay(model=MODEL, include_usage=False)
    with pytest.raises(UpstreamMalformed, match="Rate limit reached"):
        relay.feed('{"error":{"message":"Rate limit reached","code":429}}')


def test_error_frame_is_byte_exact() -> None:
    assert error_frame("upstream went away", code="upstream_disconnected") == (
        b'data: {"error":{"message":"upstream went away","type":"upstream_error",'
        b'"param":null,"code":"upstream_disconnected"}}\n\n'
    )


_DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("field", ["choices", "usage"])
def test_an_upstream_object_nested_thousands_deep_is_a_protocol_error(field: str) -> None:
    body = f'{{"model":"x","{field}":{_DEEP}}}'.encode()
    with pytest.raises(UpstreamMalformed):
        rewrite_model_in_object(body, "m")


def test_a_chunk_nested_thousands_deep_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamMalformed):
        ChunkRelay(model="m", include_usage=False).feed('{"choices":' + _DEEP + "}")
