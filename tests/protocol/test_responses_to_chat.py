"""A Responses request and its context → the chat-completions request sent upstream."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.errors import APIError
from protocol.responses.request import parse_responses_request
from protocol.responses.to_chat import chat_request, check_call_ids


def request(**body: Any) -> Any:
    return parse_responses_request(msgspec.json.encode({"model": "small", **body}))


def test_the_chain_then_the_input_in_order_with_instructions_first() -> None:
    earlier = request(input=[{"role": "developer", "content": "d"}, "q1"][:1]).input
    r = request(input="q2", instructions="be brief", temperature=0.2, max_output_tokens=9)
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "a1", "annotations": []}],
    }
    body = chat_request(r, [*earlier, answer, *r.input], model="up")
    assert body == {
        "model": "up",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "system", "content": "d"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "q2"},
        ],
        "temperature": 0.2,
        "max_tokens": 9,
    }


def test_function_calls_and_outputs_become_tool_calls_and_tool_messages() -> None:
    tool = {"type": "function", "name": "get_weather"}
    r = request(
        input=[{"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
        tools=[tool],
        stream=True,
    )
    context = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "w?"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"a":1}'},
        {"type": "function_call_output", "call_id": "c2", "output": "rain"},
        *r.input,
    ]
    body = chat_request(r, context, model="up")
    assert body["messages"] == [
        {"role": "user", "content": "w?"},
        {
            "role": "assistant",
            "content": "x",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"a":1}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["parallel_tool_calls"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_a_call_without_a_preceding_message_opens_its_own_assistant_message() -> None:
    r = request(input="x")
    context = [{"type": "function_call", "call_id": "c", "name": "f", "arguments": ""}]
    assert chat_request(r, context, model="m")["messages"] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}
            ],
        }
    ]


def test_an_output_must_answer_a_call_earlier_in_the_conversation() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""}
    out = {"type": "function_call_output", "call_id": "c1", "output": "o"}
    check_call_ids([call], [out])
    check_call_ids([], [call, out])
    with pytest.raises(APIError) as caught:
        check_call_ids([], [{"type": "message"}, out])
    assert (caught.value.param, caught.value.code) == ("input[1].call_id", "unknown_call_id")
    with pytest.raises(APIError):
        check_call_ids([], [out, call])  # the call must come first
