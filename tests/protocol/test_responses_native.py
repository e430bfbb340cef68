"""The native Responses path's pure parts: the forwarded request, a provider's answer taken
over with the gateway's identity, and its event stream — hostile answers included."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.errors import UpstreamMalformed
from protocol.responses.native import (
    NativeStream,
    native_request,
    native_response,
)
from protocol.responses.objects import ResponseObject
from protocol.responses.request import parse_responses_request
from protocol.sse import DONE, SSEEvent

SKELETON = ResponseObject(id="resp_ours", created_at=5, model="native/m", metadata={"k": "v"})


def answer(**extra: Any) -> dict[str, Any]:
    message = {
        "type": "message",
        "id": "msg_p",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "hi", "annotations": []}],
    }
    return {
        "id": "resp_theirs",
        "model": "m-2025",
        "status": "completed",
        "output": [{"type": "web_search_call", "id": "ws_1"}, message],
        "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
        **extra,
    }


def test_the_request_carries_the_context_without_ids_and_store_false() -> None:
    request = parse_responses_request(
        msgspec.json.encode(
            {"model": "nat", "input": "q", "tools": [{"type": "web_search"}], "temperature": 0.1}
        )
    )
    context = [{"id": "ws_1", "type": "web_search_call"}, *request.input]
    body = msgspec.json.decode(native_request(request, context, model="m"))
    assert body == {
        "model": "m",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}
        ],
        "store": False,
        "tools": [{"type": "web_search"}],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "temperature": 0.1,
    }


def test_an_answer_keeps_the_output_and_takes_the_gateways_identity() -> None:
    out, usage = native_response(msgspec.json.encode(answer()), SKELETON, completed_at=9)
    assert (out["id"], out["model"], out["metadata"], out["created_at"]) == (
        "resp_ours",
        "native/m",
        {"k": "v"},
        5,
    )
    assert [i["type"] for i in out["output"]] == ["web_search_call", "message"]
    assert out["completed_at"] == 9 and out["usage"]["total_tokens"] == 5
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, 2)


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"{}",
        b'{"output": 5}',
        b'{"output": [{"no": "type"}]}',
        b"nope",
        b'{"output": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        b"\xff",
    ],
)
def test_hostile_answers_raise_the_shape_error(body: bytes) -> None:
    with pytest.raises(UpstreamMalformed):
        native_response(body, SKELETON, completed_at=None)


def feed(stream: NativeStream, payload: object) -> list[bytes]:
    data = payload if isinstance(payload, str) else msgspec.json.encode(payload).decode()
    return stream.feed(SSEEvent(event=None, data=data))


def test_a_stream_passes_through_with_the_gateways_identity() -> None:
    stream = NativeStream(SKELETON, clock=lambda: 9.0)
    opening = {"id": "resp_theirs", "model": "m-2025", "status": "in_progress", "output": []}
    frames = feed(stream, {"type": "response.created", "sequence_number": 0, "response": opening})
    created = msgspec.json.decode(frames[0].split(b"data: ", 1)[1])
    assert created["response"]["id"] == "resp_ours" and frames[0].startswith(b"event: response.")
    feed(stream, {"type": "response.output_text.delta", "sequence_number": 1, "delta": "hi"})
    assert not stream.finished and stream.deltas == 1
    frames = feed(
        stream, {"type": "response.completed", "sequence_number": 2, "response": answer()}
    )
    assert stream.finished and stream.response is not None
    assert stream.response["id"] == "resp_ours" and stream.response["completed_at"] == 9
    assert stream.usage is not None and stream.usage.completion_tokens == 2
    assert feed(stream, "[DONE]") == [] and stream.finish() == [DONE] and stream.finish() == []


@pytest.mark.parametrize(
    "payload",
    ["not json", "[]", {"no": "type"}, {"type": "response.completed", "response": {"output": 5}}],
)
def test_a_malformed_event_ends_the_stream_failed_once(payload: object) -> None:
    stream = NativeStream(SKELETON, clock=lambda: 1.0)
    frames = feed(stream, payload)
    assert frames[-1] == DONE and b"response.failed" in frames[0]
    failed = msgspec.json.decode(frames[0].split(b"data: ", 1)[1])
    assert failed["response"]["id"] == "resp_ours" and failed["response"]["status"] == "failed"
    assert not stream.finished
    assert feed(stream, {"type": "response.created"}) == [] and stream.fail("x", code="") == []
