"""Chat completion bodies (OpenAI-compatible and Anthropic-translated) into response objects."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from openai.types.responses import Response, ResponseFunctionToolCall, ResponseOutputMessage

from bench.upstream.anthropic_routes import messages
from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.completion import TOOL_ARGUMENTS, TOOL_NAME
from bench.upstream.openai_routes import chat_completions
from bench.upstream.replies import JsonReply
from protocol.anthropic import from_messages_response
from protocol.errors import UpstreamMalformed
from protocol.responses.from_chat import response_from_chat
from protocol.responses.objects import (
    FunctionCallItem,
    OutputMessage,
    OutputRefusal,
    OutputText,
    ResponseObject,
    encode_response,
)
from protocol.usage import Usage

MODEL = "openai/gpt-4o-mini"


def skeleton(**fields: Any) -> ResponseObject:
    base: dict[str, Any] = {
        "id": "resp_test",
        "created_at": 1_700_000_000,
        "model": MODEL,
        "metadata": {"k": "v"},
        "instructions": "Be brief.",
        "previous_response_id": "resp_prev",
        "max_output_tokens": 50,
    }
    base.update(fields)
    return ResponseObject(**base)


def openai_body(max_tokens: int | None = None, **behavior: Any) -> bytes:
    chat: dict[str, Any] = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    if max_tokens is not None:
        chat["max_tokens"] = max_tokens
    request = RecordedRequest(
        "POST", "/v1/chat/completions", {"authorization": "Bearer k"}, json.dumps(chat).encode()
    )
    reply = chat_completions(request, UpstreamBehavior(**behavior))
    assert isinstance(reply, JsonReply) and reply.status == 200
    return reply.body


def anthropic_body(max_tokens: int = 100, **behavior: Any) -> bytes:
    """The bench Anthropic upstream's message, as the gateway translates it to chat."""
    asked = {
        "model": "claude-sonnet-4",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "hi"}],
    }
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    request = RecordedRequest("POST", "/v1/messages", headers, json.dumps(asked).encode())
    reply = messages(request, UpstreamBehavior(**behavior))
    assert isinstance(reply, JsonReply) and reply.status == 200
    chat, _ = from_messages_response(reply.body, model="anthropic/claude-sonnet-4")
    return chat


def completion(message: dict[str, Any], finish: str = "stop", **extra: Any) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    body.update(extra)
    return json.dumps(body).encode()


def sdk(obj: ResponseObject) -> Response:
    """What the openai SDK makes of the encoded object (strict validation)."""
    return Response.model_validate_json(encode_response(obj))


# --- OpenAI-compatible bodies ------------------------------------------------------------------


def test_text_answer_becomes_one_message_item_with_usage() -> None:
    base = skeleton()
    out = response_from_chat(openai_body(completion_tokens=4), base)
    assert out.status == "completed" and out.incomplete_details is None and out.error is None
    assert len(out.output) == 1
    item = out.output[0]
    assert isinstance(item, OutputMessage)
    assert item.id.startswith("msg_") and item.status == "completed" and item.role == "assistant"
    assert item.content == [OutputText("tok0 tok1 tok2 tok3 ")]
    assert out.usage is not None
    assert (out.usage.input_tokens, out.usage.output_tokens) == (4, 4)
    assert out.usage.total_tokens == 8
    # the skeleton's fields are kept, the skeleton itself is untouched
    assert (out.id, out.metadata, out.instructions) == ("resp_test", {"k": "v"}, "Be brief.")
    assert out.previous_response_id == "resp_prev" and out.max_output_tokens == 50
    assert base.output == [] and base.status == "in_progress"
    parsed = sdk(out)
    assert parsed.output_text == "tok0 tok1 tok2 tok3 " and parsed.status == "completed"


def test_tool_call_becomes_a_function_call_item_with_the_chat_call_id() -> None:
    body = openai_body(tool_call=True)
    call_id = msgspec.json.decode(body)["choices"][0]["message"]["tool_calls"][0]["id"]
    out = response_from_chat(body, skeleton())
    assert len(out.output) == 1
    item = out.output[0]
    assert isinstance(item, FunctionCallItem)
    assert item.id.startswith("fc_") and item.call_id == call_id
    assert (item.name, item.arguments, item.status) == (TOOL_NAME, TOOL_ARGUMENTS, "completed")
    parsed = sdk(out).output[0]
    assert isinstance(parsed, ResponseFunctionToolCall) and parsed.call_id == call_id


def test_length_makes_the_response_incomplete() -> None:
    out = response_from_chat(openai_body(max_tokens=2, completion_tokens=10), skeleton())
    assert out.status == "incomplete"
    assert out.incomplete_details is not None
    assert out.incomplete_details.reason == "max_output_tokens"
    assert out.output[0].status == "incomplete"
    parsed = sdk(out)
    assert parsed.incomplete_details is not None and parsed.output_text == "tok0 tok1 "


def test_content_filter_makes_the_response_incomplete() -> None:
    out = response_from_chat(completion({"content": "partial"}, "content_filter"), skeleton())
    assert out.status == "incomplete"
    assert out.incomplete_details is not None
    assert out.incomplete_details.reason == "content_filter"


def test_text_and_several_tool_calls_keep_their_order_only_the_last_is_cut() -> None:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": f"f{i}", "arguments": "{}"}}
        for i in range(3)
    ]
    message = {"role": "assistant", "content": "Let me check.", "tool_calls": calls}
    out = response_from_chat(completion(message, "length"), skeleton())
    assert [item.__class__ for item in out.output] == [OutputMessage] + [FunctionCallItem] * 3
    assert [item.call_id for item in out.output[1:]] == ["call_0", "call_1", "call_2"]  # type: ignore[union-attr]
    assert [item.status for item in out.output] == ["completed"] * 3 + ["incomplete"]
    assert len({item.id for item in out.output}) == 4


def test_refusal_becomes_a_refusal_part() -> None:
    out = response_from_chat(completion({"content": None, "refusal": "I can't."}), skeleton())
    assert isinstance(out.output[0], OutputMessage)
    assert out.output[0].content == [OutputRefusal("I can't.")]
    sdk(out)


def test_empty_answer_has_no_items() -> None:
    out = response_from_chat(completion({"role": "assistant", "content": ""}), skeleton())
    assert out.output == [] and out.status == "completed"
    assert sdk(out).output_text == ""


def test_reasoning_is_not_carried_over() -> None:
    message = {"role": "assistant", "content": "42", "reasoning": "let me think"}
    out = response_from_chat(completion(message), skeleton())
    assert len(out.output) == 1 and out.output_text == "42"


def test_lenient_shapes_some_servers_send() -> None:
    # content parts instead of a string, arguments as an object, a missing call id
    message = {
        "content": [
            {"type": "text", "text": "a"},
            {"type": "image"},
            {"type": "text", "text": "b"},
        ],
        "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}],
    }
    out = response_from_chat(completion(message, "tool_calls"), skeleton())
    assert out.output_text == "ab"
    call = out.output[1]
    assert isinstance(call, FunctionCallItem)
    assert json.loads(call.arguments) == {"x": 1} and call.call_id.startswith("call_")


def test_the_first_choice_counts() -> None:
    body = completion({"content": "zero"})
    decoded = json.loads(body)
    decoded["choices"].insert(
        0, {"index": 1, "message": {"content": "one"}, "finish_reason": "stop"}
    )
    out = response_from_chat(json.dumps(decoded).encode(), skeleton())
    assert out.output_text == "zero"


def test_usage_details_and_the_callers_usage() -> None:
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 6},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    out = response_from_chat(completion({"content": "x"}, usage=usage), skeleton())
    assert out.usage is not None
    assert out.usage.input_tokens_details.cached_tokens == 6
    assert out.usage.output_tokens_details.reasoning_tokens == 2
    billed = response_from_chat(completion({"content": "x"}), skeleton(), usage=Usage.of(7, 3))
    assert billed.usage is not None
    assert (billed.usage.input_tokens, billed.usage.output_tokens) == (7, 3)


@pytest.mark.parametrize(
    "usage",
    [None, "many", 12, {"prompt_tokens": "x"}, {"prompt_tokens_details": [1]}],
)
def test_odd_usage_never_fails_the_answer(usage: object) -> None:
    out = response_from_chat(completion({"content": "x"}, usage=usage), skeleton())
    assert out.output_text == "x"
    if out.usage is not None:
        assert out.usage.input_tokens >= 0 and out.usage.input_tokens_details.cached_tokens == 0


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"null",
        b"[]",
        b"42",
        b"{}",
        b'{"choices": []}',
        b'{"choices": null}',
        b'{"choices": {}}',
        b'{"choices": [null]}',
        b'{"choices": [{}]}',
        b'{"choices": [{"message": null}]}',
        b'{"choices": [{"message": {"content": 5}}]}',
        b'{"choices": [{"index": "0", "message": {"content": "x"}}]}',
        b'{"choices": [{"message": {"content": "x"}, "finish_reason": 3}]}',
        b'{"choices": [{"message": {"tool_calls": {}}}]}',
        b'{"choices": [{"message": {"tool_calls": [{"id": "c"}]}}]}',
        b'{"choices": [{"message": {"tool_calls": [{"function": {"name": 1}}]}}]}',
        b'{"choices": [{"message": {"content": "x"}}], "error": {"message": "overloaded"}}',
        b'{"error": "boom"}',
        b'{"choices": [{"message": {"content": "\xff\xfe"}}]}',
        b"[" * 10_000,
        b'{"choices": [{"message": {"content": "x"}}], "usage": ' + b"[" * 100_000,
        b'{"choices": [{"message": {"content": "x"}}], "error": ' + b'{"a":' * 100_000,
    ],
)
def test_hostile_bodies_raise_the_shape_error(body: bytes) -> None:
    with pytest.raises(UpstreamMalformed) as caught:
        response_from_chat(body, skeleton())
    assert type(caught.value) is UpstreamMalformed  # never a raw ValueError or RecursionError
    assert str(caught.value)


def test_an_error_body_names_the_upstream_message() -> None:
    with pytest.raises(UpstreamMalformed, match="overloaded"):
        response_from_chat(b'{"error": {"message": "overloaded"}}', skeleton())


# --- Anthropic-translated bodies ---------------------------------------------------------------


def test_anthropic_text_answer() -> None:
    out = response_from_chat(anthropic_body(completion_tokens=3), skeleton())
    assert out.status == "completed" and out.output_text == "tok0 tok1 tok2 "
    assert out.usage is not None and out.usage.output_tokens == 3


def test_anthropic_thinking_is_dropped_text_kept() -> None:
    out = response_from_chat(anthropic_body(completion_tokens=2, reasoning=True), skeleton())
    assert len(out.output) == 1 and out.output_text == "tok0 tok1 "


def test_anthropic_tool_use_becomes_a_function_call() -> None:
    body = anthropic_body(tool_call=True)
    out = response_from_chat(body, skeleton())
    assert len(out.output) == 1
    item = out.output[0]
    assert isinstance(item, FunctionCallItem)
    assert item.call_id.startswith("toolu_") and item.name == TOOL_NAME
    assert json.loads(item.arguments) == json.loads(TOOL_ARGUMENTS)
    parsed = sdk(out).output[0]
    assert isinstance(parsed, ResponseFunctionToolCall) and parsed.call_id == item.call_id


def test_anthropic_max_tokens_is_incomplete() -> None:
    out = response_from_chat(anthropic_body(max_tokens=2, completion_tokens=10), skeleton())
    assert out.status == "incomplete"
    assert out.incomplete_details is not None
    assert out.incomplete_details.reason == "max_output_tokens"
    message = sdk(out).output[0]
    assert isinstance(message, ResponseOutputMessage) and message.status == "incomplete"


def test_completed_at_is_stamped_on_completed_responses_only() -> None:
    done = response_from_chat(completion({"content": "x"}), skeleton(), completed_at=1_700_000_005)
    assert done.completed_at == 1_700_000_005 and sdk(done).completed_at == 1_700_000_005
    cut = response_from_chat(
        completion({"content": "x"}, "length"), skeleton(), completed_at=1_700_000_005
    )
    assert cut.completed_at is None
    assert response_from_chat(completion({"content": "x"}), skeleton()).completed_at is None
