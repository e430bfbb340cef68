"""The Responses create body: every field validated, 400 naming the `param`; input items
normalized (ids assigned); built-in tools refused."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.errors import APIError
from protocol.responses.request import parse_responses_request, refuse_builtin_tools


def parse(**body: Any) -> Any:
    return parse_responses_request(msgspec.json.encode({"model": "small", **body}))


def refused(body: dict[str, Any]) -> APIError:
    with pytest.raises(APIError) as caught:
        parse_responses_request(msgspec.json.encode(body))
    assert caught.value.status == 400
    return caught.value


def test_a_string_input_is_one_user_message_and_defaults_apply() -> None:
    r = parse(input="hi")
    assert len(r.input) == 1
    item = r.input[0]
    assert item["id"].startswith("msg_")
    assert {k: v for k, v in item.items() if k != "id"} == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "hi"}],
    }
    assert (r.store, r.stream, r.parallel_tool_calls, r.metadata) == (True, False, True, {})
    assert r.tools == [] and r.tool_choice is None and r.response_tool_choice == "auto"


def test_typed_items_are_normalized_and_keep_their_ids() -> None:
    r = parse(
        input=[
            {"role": "developer", "content": "be brief"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "b"}], "id": "m1"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
        ],
        instructions="sys",
        temperature=0.5,
        max_output_tokens=7,
        store=False,
        stream=True,
        metadata={"k": "v"},
        previous_response_id="resp_x",
    )
    kinds = [(i["type"], i.get("role")) for i in r.input]
    assert kinds == [
        ("message", "developer"),
        ("message", "user"),
        ("message", "assistant"),
        ("function_call", None),
        ("function_call_output", None),
    ]
    assert r.input[2]["id"] == "m1"
    assert r.input[2]["content"] == [{"type": "output_text", "text": "b", "annotations": []}]
    assert r.input[3]["id"].startswith("fc_") and r.input[4]["id"].startswith("fco_")
    assert (r.instructions, r.temperature, r.max_output_tokens) == ("sys", 0.5, 7)
    assert (r.store, r.stream, r.metadata, r.previous_response_id) == (
        False,
        True,
        {"k": "v"},
        "resp_x",
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "small"}, "input"),
        ({"model": "", "input": "x"}, "model"),
        ({"model": "small", "input": []}, "input"),
        ({"model": "small", "input": 5}, "input"),
        ({"model": "small", "input": [5]}, "input[0]"),
        ({"model": "small", "input": [{"type": "image", "x": 1}]}, "input[0].type"),
        ({"model": "small", "input": [{"foo": 1}]}, "input[0].type"),
        ({"model": "small", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": "small", "input": [{"role": "user"}]}, "input[0].content"),
        (
            {"model": "small", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input[0].content[0].type",
        ),
        (
            {
                "model": "small",
                "input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}],
            },
            "input[0].content[0].type",
        ),
        (
            {"model": "small", "input": [{"type": "function_call_output", "call_id": "c"}]},
            "input[0].output",
        ),
        ({"model": "small", "input": "x", "temperature": 3}, "temperature"),
        ({"model": "small", "input": "x", "temperature": "hot"}, "temperature"),
        ({"model": "small", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "small", "input": "x", "store": "yes"}, "store"),
        ({"model": "small", "input": "x", "stream": 1}, "stream"),
        ({"model": "small", "input": "x", "parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"model": "small", "input": "x", "metadata": {"k": 1}}, "metadata"),
        ({"model": "small", "input": "x", "metadata": {"k" * 65: "v"}}, "metadata"),
        ({"model": "small", "input": "x", "instructions": 5}, "instructions"),
        ({"model": "small", "input": "x", "previous_response_id": 5}, "previous_response_id"),
        ({"model": "small", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"model": "small", "input": "x", "tools": [{"type": "robot"}]}, "tools[0].type"),
        (
            {"model": "small", "input": "x", "tools": [{"type": "function", "name": "a b"}]},
            "tools[0].name",
        ),
        ({"model": "small", "input": "x", "tool_choice": "maybe"}, "tool_choice"),
        ({"model": "small", "input": "x", "tool_choice": "required"}, "tool_choice"),
        (
            {"model": "small", "input": "x", "tool_choice": {"type": "function", "name": "g"}},
            "tool_choice.name",
        ),
    ],
)
def test_each_bad_field_is_a_400_naming_it(body: dict[str, Any], param: str) -> None:
    assert refused(body).param == param


@pytest.mark.parametrize(
    "kind",
    ["web_search", "web_search_preview", "file_search", "code_interpreter", "computer_use_preview"],
)
def test_built_in_tools_are_kept_for_native_providers_and_refused_when_translated(
    kind: str,
) -> None:
    fn = {"type": "function", "name": "f"}
    r = parse(input="x", tools=[fn, {"type": kind, "x": 1}], tool_choice="required")
    assert r.builtin_tools == [("tools[1].type", kind)]
    assert r.response_tools[1] == {"type": kind, "x": 1} and len(r.tools) == 1
    with pytest.raises(APIError) as caught:
        refuse_builtin_tools(r)
    error = caught.value
    assert (error.status, error.code, error.param) == (400, "unsupported_tool", "tools[1].type")
    assert kind in error.message
    choice = parse(input="x", tools=[{"type": kind}], tool_choice={"type": kind})
    assert choice.builtin_tools[-1] == ("tool_choice.type", kind) and choice.tool_choice is None
    refuse_builtin_tools(parse(input="x", tools=[fn]))  # functions only: nothing to refuse


def test_function_tools_become_chat_tools() -> None:
    r = parse(
        input="x",
        tools=[{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
    )
    assert r.tools == [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    assert r.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert r.response_tool_choice == {"type": "function", "name": "get_weather"}
    assert r.parallel_tool_calls is False


def test_hostile_bodies_are_400s() -> None:
    deep = b'{"model": "m", "input": [{"role": "user", "content": ' + b"[" * 100_000
    with pytest.raises(APIError):
        parse_responses_request(deep + b"]" * 100_000 + b"}]}")
    deep_meta = b'{"model": "m", "input": "x", "metadata": {"k": ' + b"[" * 100_000
    with pytest.raises(APIError):
        parse_responses_request(deep_meta + b"]" * 100_000 + b"}}")
    many = [{"role": "user", "content": "x"}] * 1001
    assert refused({"model": "m", "input": many}).param == "input"
    with pytest.raises(APIError):
        parse_responses_request(b'{"model": "m", "input": "x"')
    with pytest.raises(APIError):
        parse_responses_request(b"[]")
