"""OpenAI chat ⇄ Anthropic Messages: requests, responses, recorded event streams, error bodies."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from protocol.anthropic import (
    StreamTranslator,
    from_messages_response,
    to_messages_request,
    upstream_error_message,
)
from protocol.errors import APIError, UpstreamMalformed
from protocol.sse import DONE, SSEDecoder, SSEEvent
from protocol.usage import Usage

MODEL = "anthropic/claude-sonnet-4"
PNG = "iVBORw0KGgo="


def translate(chat: dict[str, Any], **kwargs: Any) -> Any:
    options: dict[str, Any] = {"upstream_model": "claude-sonnet-4-20250514", "stream": False}
    options.update(kwargs)
    return msgspec.json.decode(to_messages_request(json.dumps(chat).encode(), **options))


def frame_json(frame: bytes) -> Any:
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    return msgspec.json.decode(frame[6:-2])


# --- requests ----------------------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_a_full_conversation_translates() -> None:
    chat = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather here and there?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {"type": "image_url", "image_url": {"url": "https://x.test/a.jpg"}},
                ],
            },
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "4C"}]},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [WEATHER_TOOL],
        "tool_choice": "required",
        "stop": "END",
        "temperature": 0.2,
        "top_p": 0.9,
        "user": "user-42",
        "logit_bias": {"1": 1},
    }
    assert translate(chat, stream=True) == {
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 4096,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather here and there?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "call_2",
                        "name": "get_weather",
                        "input": {"city": "Oslo"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_2",
                        "content": [{"type": "text", "text": "4C"}],
                    },
                ],
            },
            {"role": "user", "content": "Thanks"},
        ],
        "system": "Be brief.\n\nUse metric units.",
        "stop_sequences": ["END"],
        "temperature": 0.2,
        "top_p": 0.9,
        "tools": [
            {
                "name": "get_weather",
                "description": "Weather for a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            }
        ],
        "tool_choice": {"type": "any"},
        "metadata": {"user_id": "user-42"},
        "stream": True,
    }


def test_the_tool_schema_is_forwarded_byte_identical() -> None:
    schema = b'{ "type" : "object",  "properties": {"q": {"type": "string"}} }'
    body = (
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],'
        b'"tools":[{"type":"function","function":{"name":"s","parameters":' + schema + b"}}]}"
    )
    out = to_messages_request(body, upstream_model="c", stream=False)
    assert b'"input_schema":' + schema in out


def test_minimal_request_and_defaults() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b"]}
    assert translate(chat, default_max_tokens=1024) == {
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "hi"}],
        "stop_sequences": ["a", "b"],
    }


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
    assert translate(chat)["max_tokens"] == 10
    assert translate({**chat, "max_completion_tokens": 20})["max_tokens"] == 20


def test_a_tool_without_parameters_gets_an_empty_schema() -> None:
    tool = {"type": "function", "function": {"name": "now"}}
    chat = {"messages": [{"role": "user", "content": "hi"}], "tools": [tool]}
    assert translate(chat)["tools"] == [
        {"name": "now", "input_schema": {"type": "object", "properties": {}}}
    ]


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("required", None, {"type": "any"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            None,
            {"type": "tool", "name": "get_weather"},
        ),
        ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, None, None),
    ],
)
def test_tool_choice(choice: Any, parallel: bool | None, expected: dict[str, Any] | None) -> None:
    chat: dict[str, Any] = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [WEATHER_TOOL],
    }
    if choice is not None:
        chat["tool_choice"] = choice
    if parallel is not None:
        chat["parallel_tool_calls"] = parallel
    assert translate(chat).get("tool_choice") == expected


def test_tool_choice_without_tools_is_dropped() -> None:
    chat = {"messages": [{"role": "user", "content": "hi"}], "tool_choice": "none"}
    assert "tool_choice" not in translate(chat)


def test_empty_tool_arguments_mean_no_input() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "now", "arguments": ""}}
    chat = {"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}
    assert translate(chat)["messages"][0]["content"] == [
        {"type": "tool_use", "id": "c", "name": "now", "input": {}}
    ]


USER_HI = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("chat", "param"),
    [
        ({"messages": []}, "messages"),
        ({}, "messages"),
        ({"messages": [{"role": "system", "content": "only"}]}, "messages"),
        ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": [{"role": "assistant"}]}, "messages[0].content"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "messages[0].content[0].type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "see"},
                            {"type": "image_url", "image_url": {"url": "ftp://x/y.png"}},
                        ],
                    }
                ]
            },
            "messages[0].content[1].image_url.url",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:image/png,"}}],
                    }
                ]
            },
            "messages[0].content[0].image_url.url",
        ),
        (
            {
                "messages": [
                    USER_HI,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c", "function": {"name": "f", "arguments": "{not json"}}
                        ],
                    },
                ]
            },
            "messages[1].tool_calls",
        ),
        (
            {
                "messages": [
                    USER_HI,
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}],
                    },
                ]
            },
            "messages[1].tool_calls",
        ),
        ({"messages": [USER_HI], "max_tokens": 0}, "max_tokens"),
        ({"messages": [USER_HI], "stop": 5}, "stop"),
        ({"messages": [USER_HI], "tool_choice": "sometimes"}, "tool_choice"),
        ({"messages": [USER_HI], "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ],
)
def test_invalid_requests_are_400_with_the_param(chat: dict[str, Any], param: str) -> None:
    with pytest.raises(APIError) as info:
        translate(chat)
    assert (info.value.status, info.value.param) == (400, param)


# --- responses ---------------------------------------------------------------------------------


def test_a_response_with_thinking_text_and_tool_use() -> None:
    body = (
        b'{"id":"msg_01ABC","type":"message","role":"assistant","model":"claude-sonnet-4",'
        b'"content":[{"type":"thinking","thinking":"Let me ","signature":"s"},'
        b'{"type":"thinking","thinking":"check.","signature":"s"},'
        b'{"type":"text","text":"Checking "},{"type":"text","text":"now."},'
        b'{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city": "Paris"}},'
        b'{"type":"tool_use","id":"toolu_2","name":"now","input":{}}],'
        b'"stop_reason":"tool_use","stop_sequence":null,'
        b'"usage":{"input_tokens":10,"cache_creation_input_tokens":5,'
        b'"cache_read_input_tokens":100,"output_tokens":30}}'
    )
    out, usage = from_messages_response(body, model=MODEL)
    assert usage == Usage(115, 30, 145)
    completion = msgspec.json.decode(out)
    assert isinstance(completion.pop("created"), int)
    assert completion == {
        "id": "chatcmpl-01ABC",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Checking now.",
                    "reasoning": "Let me check.",
                    "tool_calls": [
                        {
                            "id": "toolu_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        },
                        {
                            "id": "toolu_2",
                            "type": "function",
                            "function": {"name": "now", "arguments": "{}"},
                        },
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 115, "completion_tokens": 30, "total_tokens": 145},
    }


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
    ],
)
def test_stop_reasons_map(stop_reason: str, finish_reason: str) -> None:
    body = msgspec.json.encode(
        {
            "id": "msg_1",
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": stop_reason,
            "usage": {"input_tokens": 1, "output_tokens": 2},
        }
    )
    completion = msgspec.json.decode(from_messages_response(body, model=MODEL)[0])
    choice = completion["choices"][0]
    assert choice["finish_reason"] == finish_reason
    assert choice["message"] == {"role": "assistant", "content": "hi"}


def test_a_tool_only_response_has_null_content() -> None:
    body = (
        b'{"id":"msg_1","content":[{"type":"tool_use","id":"t","name":"f","input":{}}],'
        b'"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}'
    )
    message = msgspec.json.decode(from_messages_response(body, model=MODEL)[0])["choices"][0]
    assert message["message"]["content"] is None


@pytest.mark.parametrize("body", [b"nope", b'{"id":"m"}', b'{"id":"m","content":"x"}'])
def test_a_malformed_response_is_an_upstream_error(body: bytes) -> None:
    with pytest.raises(UpstreamMalformed):
        from_messages_response(body, model=MODEL)


# --- streams -----------------------------------------------------------------------------------

TEXT_STREAM = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"msg_01XYZ","type":"message",'
    b'"role":"assistant","content":[],"model":"claude-sonnet-4-20250514","stop_reason":null,'
    b'"usage":{"input_tokens":25,"cache_read_input_tokens":5,"output_tokens":1}}}\n\n'
    b"event: content_block_start\n"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b"event: ping\n"
    b'data: {"type": "ping"}\n\n'
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}'
    b"\n\n"
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}\n\n'
    b"event: content_block_stop\n"
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b"event: message_delta\n"
    b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
    b'"usage":{"output_tokens":15}}\n\n'
    b"event: message_stop\n"
    b'data: {"type":"message_stop"}\n\n'
)


def run_stream(raw: bytes, *, include_usage: bool) -> tuple[StreamTranslator, list[bytes]]:
    translator = StreamTranslator(model=MODEL, include_usage=include_usage)
    frames: list[bytes] = []
    for event in SSEDecoder().feed(raw):
        frames.extend(translator.feed(event))
    return translator, frames + translator.finish()


def events(*payloads: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: " + p["type"].encode() + b"\ndata: " + msgspec.json.encode(p) + b"\n\n"
        for p in payloads
    )


def test_a_text_stream_is_byte_exact() -> None:
    translator, frames = run_stream(TEXT_STREAM, include_usage=True)
    created = str(translator.created).encode()
    head = (
        b'data: {"id":"chatcmpl-01XYZ","object":"chat.completion.chunk","created":'
        + created
        + b',"model":"anthropic/claude-sonnet-4",'
    )
    assert frames == [
        head + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
        b'"logprobs":null,"finish_reason":null}]}\n\n',
        head + b'"choices":[{"index":0,"delta":{"content":"Hello"},'
        b'"logprobs":null,"finish_reason":null}]}\n\n',
        head + b'"choices":[{"index":0,"delta":{"content":"!"},'
        b'"logprobs":null,"finish_reason":null}]}\n\n',
        head + b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}\n\n',
        head + b'"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":15,'
        b'"total_tokens":45}}\n\n',
        DONE,
    ]
    assert translator.finished and translator.saw_done
    assert translator.usage == Usage(30, 15, 45)


def test_usage_is_captured_but_not_sent_unless_asked() -> None:
    translator, frames = run_stream(TEXT_STREAM, include_usage=False)
    assert frames[-1] == DONE and len(frames) == 5
    assert all("usage" not in frame_json(f) for f in frames[:-1])
    assert translator.usage == Usage(30, 15, 45)


def tool_stream() -> bytes:
    def delta(index: int, partial: str) -> dict[str, Any]:
        body = {"type": "input_json_delta", "partial_json": partial}
        return {"type": "content_block_delta", "index": index, "delta": body}

    def tool_start(index: int, tool_id: str, name: str) -> dict[str, Any]:
        block = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
        return {"type": "content_block_start", "index": index, "content_block": block}

    return events(
        {"type": "message_start", "message": {"id": "msg_T", "usage": {"input_tokens": 50}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Let me check."},
        },
        {"type": "content_block_stop", "index": 0},
        tool_start(1, "toolu_A", "get_weather"),
        delta(1, ""),
        delta(1, '{"city": '),
        delta(1, '"Paris"}'),
        {"type": "content_block_stop", "index": 1},
        tool_start(2, "toolu_B", "get_time"),
        delta(2, '{"tz":"CET"}'),
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    )


def test_a_tool_use_stream() -> None:
    translator, frames = run_stream(tool_stream(), include_usage=False)
    chunks = [frame_json(f) for f in frames[:-1]]
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"] == "chatcmpl-T"
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1] == {"content": "Let me check."}
    assert deltas[2] == {
        "tool_calls": [
            {
                "index": 0,
                "id": "toolu_A",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ]
    }
    assert deltas[3] == {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}
    assert (
        deltas[5]["tool_calls"][0]["index"] == 1 and deltas[5]["tool_calls"][0]["id"] == "toolu_B"
    )
    # what a client does: concatenate per index, parse after finish_reason tool_calls
    arguments: dict[int, str] = {}
    for delta in deltas:
        for part in delta.get("tool_calls", []):
            arguments[part["index"]] = (
                arguments.get(part["index"], "") + part["function"]["arguments"]
            )
    assert {i: json.loads(a) for i, a in arguments.items()} == {
        0: {"city": "Paris"},
        1: {"tz": "CET"},
    }
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]
    assert reasons == [None] * (len(chunks) - 1) + ["tool_calls"]
    assert translator.usage == Usage(50, 9, 59)


def test_a_thinking_stream() -> None:
    raw = events(
        {"type": "message_start", "message": {"id": "msg_R", "usage": {"input_tokens": 3}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Hmm."},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "EqQB"},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "4"}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 7},
        },
        {"type": "message_stop"},
    )
    _, frames = run_stream(raw, include_usage=False)
    deltas = [frame_json(f)["choices"][0]["delta"] for f in frames[:-1]]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"reasoning": "Hmm."},
        {"content": "4"},
        {},
    ]


def test_max_tokens_ends_with_length() -> None:
    raw = TEXT_STREAM.replace(b'"stop_reason":"end_turn"', b'"stop_reason":"max_tokens"')
    _, frames = run_stream(raw, include_usage=False)
    assert frame_json(frames[-2])["choices"][0]["finish_reason"] == "length"


def test_an_error_event_raises_with_its_message() -> None:
    translator = StreamTranslator(model=MODEL, include_usage=True)
    start = '{"type":"message_start","message":{"id":"msg_E","usage":{"input_tokens":4}}}'
    assert len(translator.feed(SSEEvent("message_start", start))) == 1
    error = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    with pytest.raises(UpstreamMalformed, match="^Overloaded$"):
        translator.feed(SSEEvent("error", error))
    assert not translator.finished and translator.usage == Usage(4, 0, 4)


def test_unknown_events_are_skipped_and_broken_ones_raise() -> None:
    translator = StreamTranslator(model=MODEL, include_usage=False)
    assert translator.feed(SSEEvent("future", '{"type":"future_event","x":1}')) == []
    with pytest.raises(UpstreamMalformed):
        translator.feed(SSEEvent("content_block_delta", '{"type":"content_block_delta"}'))
    with pytest.raises(UpstreamMalformed):
        translator.feed(SSEEvent(None, "not json"))


def test_a_stream_without_message_start_still_has_one_role_and_id() -> None:
    translator = StreamTranslator(model=MODEL, include_usage=False)
    delta = '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}'
    first, second = (frame_json(translator.feed(SSEEvent(None, delta))[0]) for _ in range(2))
    assert first["id"] == second["id"] and first["id"].startswith("chatcmpl-")
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "a"}
    assert second["choices"][0]["delta"] == {"content": "a"}
    assert translator.finish() == [DONE] and translator.finish() == []


# --- error bodies ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            "Overloaded",
        ),
        (
            b'{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error"}}',
            "Incorrect API key provided.",
        ),
        (b'{"error":"model not loaded"}', "model not loaded"),
        (b'{"detail":"Not Found"}', "Not Found"),
        (b'{"error":{"message":""}}', "upstream returned 503"),
        (b"<html>Bad Gateway</html>", "upstream returned 503"),
        (b"", "upstream returned 503"),
        (b"[1,2]", "upstream returned 503"),
    ],
)
def test_upstream_error_message(body: bytes, message: str) -> None:
    assert upstream_error_message(503, body) == message


def test_upstream_error_message_is_short() -> None:
    body = msgspec.json.encode({"error": {"message": "x" * 5000}})
    assert len(upstream_error_message(500, body)) <= 300


_DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "data",
    [
        '{"type":"content_block_delta","index":0,"delta":' + _DEEP + "}",
        '{"type":"some_new_event","payload":' + _DEEP + "}",
    ],
)
def test_a_stream_event_nested_thousands_deep_is_a_protocol_error(data: str) -> None:
    translator = StreamTranslator(model=MODEL, include_usage=False)
    with pytest.raises(UpstreamMalformed):
        translator.feed(SSEEvent(event="x", data=data))


def test_a_message_nested_thousands_deep_or_not_utf8_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamMalformed):
        from_messages_response(
            ('{"content":[{"type":"text","text":' + _DEEP + "}]}").encode(), model=MODEL
        )
    not_utf8 = (
        b'{"id":"msg_1","type":"message","role":"assistant","model":"m","content":'
        b'[{"type":"tool_use","id":"t","name":"n","input":{"a":"\xff"}}],'
        b'"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}'
    )
    with pytest.raises(UpstreamMalformed):
        from_messages_response(not_utf8, model=MODEL)
