"""Response objects: encoding the openai SDK parses strictly, stored items decode back."""

from __future__ import annotations

import msgspec
import pytest
from openai.types.responses import Response, ResponseOutputMessage, ResponseOutputRefusal
from openai.types.responses import ResponseUsage as SDKUsage

from protocol.responses.objects import (
    FunctionCallItem,
    IncompleteDetails,
    OutputMessage,
    OutputRefusal,
    OutputText,
    ResponseObject,
    decode_output_items,
    decode_response,
    encode_output_items,
    encode_response,
    new_item_id,
    new_response_id,
    response_error,
    usage_from_chat,
)
from protocol.usage import Usage


def full_response() -> ResponseObject:
    return ResponseObject(
        id=new_response_id(),
        created_at=1_700_000_000,
        model="openai/gpt-4o-mini",
        status="completed",
        output=[
            OutputMessage(
                id=new_item_id("msg"),
                status="completed",
                content=[OutputText("Hello, "), OutputText("world", annotations=[])],
            ),
            FunctionCallItem(
                id=new_item_id("fc"),
                call_id="call_1",
                name="get_weather",
                arguments='{"city": "Paris"}',
                status="completed",
            ),
        ],
        usage=usage_from_chat(Usage.of(12, 7)),
        metadata={"team": "a"},
        tools=[{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0.5,
        instructions="Be brief.",
        previous_response_id="resp_prev",
    )


def test_ids_have_their_prefixes_and_do_not_repeat() -> None:
    ids = {new_response_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("resp_") and len(i) == 29 for i in ids)
    assert new_item_id("msg").startswith("msg_")
    assert new_item_id("fc_").startswith("fc_") and "__" not in new_item_id("fc_")


def test_encoding_has_every_field_with_nulls_not_omitted() -> None:
    skeleton = ResponseObject(id="resp_x", created_at=1, model="m")
    body = msgspec.json.decode(encode_response(skeleton))
    assert body["object"] == "response"
    assert body["status"] == "in_progress"
    assert body["output"] == [] and body["metadata"] == {}
    assert body["tools"] == [] and body["tool_choice"] == "auto"
    assert body["parallel_tool_calls"] is True and body["store"] is True
    assert body["text"] == {"format": {"type": "text"}}
    for key in ("error", "incomplete_details", "usage", "instructions", "user", "top_p"):
        assert key in body and body[key] is None


def test_sdk_response_model_validates_strictly() -> None:
    obj = full_response()
    sdk = Response.model_validate_json(encode_response(obj))
    assert sdk.id == obj.id and sdk.object == "response"
    assert sdk.output_text == "Hello, world" == obj.output_text
    call = sdk.output[1]
    assert call.type == "function_call" and call.call_id == "call_1"
    assert call.arguments == '{"city": "Paris"}'
    assert sdk.usage is not None
    assert (sdk.usage.input_tokens, sdk.usage.output_tokens, sdk.usage.total_tokens) == (12, 7, 19)
    assert sdk.usage.input_tokens_details.cached_tokens == 0
    assert sdk.usage.output_tokens_details.reasoning_tokens == 0
    assert sdk.metadata == {"team": "a"}


def test_sdk_parses_failed_and_incomplete_shapes() -> None:
    failed = ResponseObject(
        id="resp_f",
        created_at=1,
        model="m",
        status="failed",
        error=response_error("upstream broke", "upstream_error"),
    )
    sdk = Response.model_validate_json(encode_response(failed))
    assert sdk.error is not None and sdk.error.code == "server_error"
    assert sdk.error.message == "upstream broke"
    incomplete = ResponseObject(
        id="resp_i",
        created_at=1,
        model="m",
        status="incomplete",
        incomplete_details=IncompleteDetails(reason="max_output_tokens"),
    )
    sdk = Response.model_validate_json(encode_response(incomplete))
    assert sdk.incomplete_details is not None
    assert sdk.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("upstream_error", "server_error"),
        ("upstream_timeout", "server_error"),
        (None, "server_error"),
        ("rate_limit_exceeded", "rate_limit_exceeded"),
    ],
)
def test_error_codes_map_onto_the_sdk_set(code: str | None, expected: str) -> None:
    assert response_error("m", code).code == expected


def test_stored_output_items_decode_back_to_their_types() -> None:
    obj = full_response()
    raw = encode_output_items(obj.output)
    items = decode_output_items(raw)
    assert items == obj.output
    assert isinstance(items[0], OutputMessage) and isinstance(items[1], FunctionCallItem)
    assert decode_response(encode_response(obj)) == obj


def test_refusal_parts_round_trip_and_the_sdk_reads_them() -> None:
    message = OutputMessage(id="msg_1", status="completed", content=[OutputRefusal("no")])
    assert decode_output_items(encode_output_items([message])) == [message]
    obj = ResponseObject(id="resp_r", created_at=1, model="m", output=[message])
    sdk = Response.model_validate_json(encode_response(obj))
    item = sdk.output[0]
    assert isinstance(item, ResponseOutputMessage)
    part = item.content[0]
    assert isinstance(part, ResponseOutputRefusal) and part.refusal == "no"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"{}",
        b'[{"type": "reasoning", "id": "rs_1"}]',
        b'[{"type": "message", "id": "m"}]',
        b'[{"type": "function_call", "id": 1, "call_id": "c", "name": "n",'
        b' "arguments": "{}", "status": "completed"}]',
    ],
)
def test_malformed_stored_items_raise_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_output_items(raw)


def test_usage_from_chat_fills_a_missing_total() -> None:
    usage = usage_from_chat(Usage(prompt_tokens=3, completion_tokens=4, total_tokens=0))
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (3, 4, 7)
    SDKUsage.model_validate_json(msgspec.json.encode(usage))
