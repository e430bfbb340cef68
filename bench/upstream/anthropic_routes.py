"""The Anthropic wire format: `POST /v1/messages` (JSON and SSE), `GET /v1/models`, error bodies.

A pure function from the recorded request and the behavior snapshot to a Reply; nothing here waits
or writes. Requests need `x-api-key` and `anthropic-version` headers (401 otherwise) and
`max_tokens` (400 otherwise). input_tokens counts the system prompt's words too; thinking words
are not counted in output_tokens. Stream order: message_start, content_block_start, ping, deltas,
content_block_stop (per block), message_delta, message_stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.completion import (
    PER_MESSAGE_TOKENS,
    TOOL_ARGUMENT_FRAGMENTS,
    TOOL_ARGUMENTS,
    TOOL_NAME,
    Completion,
    answer_id,
    count_words,
    plan_completion,
)
from bench.upstream.replies import JsonReply, Reply, SseFrame, StreamReply

THINKING_SIGNATURE = "sig"
MODELS = ("claude-haiku", "claude-sonnet")


class _Block(msgspec.Struct):
    type: str = "text"
    text: str = ""


class _Message(msgspec.Struct):
    role: str
    content: str | list[_Block]


class _MessagesRequest(msgspec.Struct):
    model: str
    messages: list[_Message]
    max_tokens: int | None = None
    system: str | list[_Block] | None = None
    stream: bool = False


_decoder = msgspec.json.Decoder(_MessagesRequest)
_encode = msgspec.json.encode

_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def error_reply(status: int, message: str, *, headers: Sequence[tuple[str, str]] = ()) -> JsonReply:
    """`{"type": "error", "error": {type, message}}`, typed by status as Anthropic does."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JsonReply(status, _encode(body), headers)


def fail_reply(status: int, retry_after: str | None) -> JsonReply:
    headers = [("retry-after", retry_after)] if retry_after is not None else []
    return error_reply(status, f"simulated upstream failure ({status})", headers=headers)


def stream_error_frame(status: int) -> bytes:
    """Anthropic's in-stream `error` event (e.g. `overloaded_error` for 529), ending a stream."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = f"simulated upstream failure in the stream ({status})"
    return _event("error", {"type": "error", "error": {"type": kind, "message": message}})[0]


def _text(content: str | list[_Block] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(block.text for block in content)


def _unauthorized(request: RecordedRequest) -> JsonReply | None:
    for name in ("x-api-key", "anthropic-version"):
        if not request.headers.get(name):
            return error_reply(401, f"{name} header is required")
    return None


_MODELS_BODY = _encode(
    {
        "data": [
            {
                "type": "model",
                "id": name,
                "display_name": name.replace("-", " ").title(),
                "created_at": "2025-01-01T00:00:00Z",
            }
            for name in MODELS
        ],
        "has_more": False,
        "first_id": MODELS[0],
        "last_id": MODELS[-1],
    }
)


def models(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    """`GET /v1/models`, Anthropic's shape."""
    return _unauthorized(request) or JsonReply(200, _MODELS_BODY)


def messages(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    refused = _unauthorized(request)
    if refused is not None:
        return refused
    try:
        asked = _decoder.decode(request.body)
    except msgspec.DecodeError as exc:
        return error_reply(400, str(exc))
    if asked.max_tokens is None:
        return error_reply(400, "max_tokens: Field required")
    if asked.max_tokens < 1:
        return error_reply(400, "max_tokens: must be greater than or equal to 1")
    input_tokens = count_words([_text(asked.system), *(_text(m.content) for m in asked.messages)])
    input_tokens += PER_MESSAGE_TOKENS * len(asked.messages)
    plan = plan_completion(behavior, asked.max_tokens)
    if asked.stream:
        return _stream(asked.model, plan, input_tokens)
    content: list[dict[str, Any]] = []
    if plan.reasoning:
        content.append(
            {"type": "thinking", "thinking": plan.reasoning_text, "signature": THINKING_SIGNATURE}
        )
    if plan.tool_call:
        tool_input = msgspec.json.decode(TOOL_ARGUMENTS)
        content.append(
            {"type": "tool_use", "id": answer_id("toolu_"), "name": TOOL_NAME, "input": tool_input}
        )
    else:
        content.append({"type": "text", "text": plan.text})
    body = {
        "id": answer_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": asked.model,
        "content": content,
        "stop_reason": _STOP_REASONS[plan.finish],
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": plan.completion_tokens},
    }
    return JsonReply(200, _encode(body))


def _event(name: str, payload: dict[str, Any], counted: bool = False) -> SseFrame:
    return (b"event: %b\ndata: %b\n\n" % (name.encode(), _encode(payload)), counted)


def _delta(index: int, delta: dict[str, str], counted: bool = True) -> SseFrame:
    payload = {"type": "content_block_delta", "index": index, "delta": delta}
    return _event("content_block_delta", payload, counted)


def _stream(model: str, plan: Completion, input_tokens: int) -> StreamReply:
    message: dict[str, Any] = {
        "id": answer_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    frames = [_event("message_start", {"type": "message_start", "message": message})]
    blocks: list[tuple[dict[str, Any], list[SseFrame]]] = []
    if plan.reasoning:
        deltas = [_delta(0, {"type": "thinking_delta", "thinking": f}) for f in plan.reasoning]
        signature = {"type": "signature_delta", "signature": THINKING_SIGNATURE}
        deltas.append(_delta(0, signature, counted=False))
        blocks.append(({"type": "thinking", "thinking": ""}, deltas))
    index = len(blocks)
    if plan.tool_call:
        start = {"type": "tool_use", "id": answer_id("toolu_"), "name": TOOL_NAME, "input": {}}
        deltas = [
            _delta(index, {"type": "input_json_delta", "partial_json": f})
            for f in TOOL_ARGUMENT_FRAGMENTS
        ]
        blocks.append((start, deltas))
    else:
        deltas = [_delta(index, {"type": "text_delta", "text": f}) for f in plan.fragments]
        blocks.append(({"type": "text", "text": ""}, deltas))
    for i, (start_block, deltas) in enumerate(blocks):
        start_event = {"type": "content_block_start", "index": i, "content_block": start_block}
        frames.append(_event("content_block_start", start_event))
        if i == 0:
            frames.append(_event("ping", {"type": "ping"}))
        frames += deltas
        frames.append(_event("content_block_stop", {"type": "content_block_stop", "index": i}))
    stop = {"stop_reason": _STOP_REASONS[plan.finish], "stop_sequence": None}
    usage = {"output_tokens": plan.completion_tokens}
    frames.append(_event("message_delta", {"type": "message_delta", "delta": stop, "usage": usage}))
    frames.append(_event("message_stop", {"type": "message_stop"}))
    return StreamReply(frames)
