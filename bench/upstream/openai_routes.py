"""The OpenAI wire format: chat completions (JSON and SSE), embeddings, models, error bodies.

Embeddings come from bench/upstream/embedding.py (similar texts, similar vectors), of the
`dimensions` asked for (default 256), as floats or, with `encoding_format: "base64"`, as OpenAI
sends them then: the float32 little-endian bytes in base64.

Each route is a pure function from the recorded request and the behavior snapshot to a Reply;
nothing here waits or writes (the server paces streams). Requests need `Authorization: Bearer
<anything>`. Stream chunks carry `"usage": null` only when `stream_options.include_usage` is true,
as OpenAI does; the usage chunk (empty `choices`) then precedes `data: [DONE]`. A model whose name
contains "guard" (or "shieldgemma") answers as a guard model, its verdict from trigger words
(classifier.py), whatever the behavior says.
"""

from __future__ import annotations

import array
import base64
import sys
import time
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.classifier import guard_verdict
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
from bench.upstream.embedding import DEFAULT_DIMENSIONS, MAX_DIMENSIONS, embed
from bench.upstream.replies import JsonReply, Reply, SseFrame, StreamReply

MODELS = ("sim-small", "sim-large")


class _Part(msgspec.Struct):
    type: str = "text"
    text: str = ""


class _Message(msgspec.Struct):
    role: str = "user"
    content: str | list[_Part] | None = None


class _StreamOptions(msgspec.Struct):
    include_usage: bool = False


class _ChatRequest(msgspec.Struct):
    model: str
    messages: list[_Message]
    stream: bool = False
    stream_options: _StreamOptions | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    continue_final_message: bool = False  # vLLM's: go on with the last (assistant) message


class _EmbeddingsRequest(msgspec.Struct):
    model: str
    input: str | list[str]
    dimensions: int | None = None
    encoding_format: Literal["float", "base64"] = "float"


_chat_decoder = msgspec.json.Decoder(_ChatRequest)
_embeddings_decoder = msgspec.json.Decoder(_EmbeddingsRequest)
_encode = msgspec.json.encode

_ERROR_TYPES = {401: "invalid_request_error", 403: "permission_error", 429: "requests"}
_ERROR_CODES = {401: "invalid_api_key", 404: "not_found", 429: "rate_limit_exceeded"}


def error_reply(
    status: int,
    message: str,
    *,
    param: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
) -> JsonReply:
    """`{"error": {message, type, param, code}}`, typed by status as OpenAI does."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error = {"message": message, "type": kind, "param": param, "code": _ERROR_CODES.get(status)}
    return JsonReply(status, _encode({"error": error}), headers)


def fail_reply(status: int, retry_after: str | None) -> JsonReply:
    headers = [("retry-after", retry_after)] if retry_after is not None else []
    return error_reply(status, f"simulated upstream failure ({status})", headers=headers)


def stream_error_frame(status: int) -> bytes:
    """The in-stream error OpenAI sends when a stream fails after it began (no `[DONE]`)."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    message = f"simulated upstream failure in the stream ({status})"
    error = {"message": message, "type": kind, "param": None, "code": _ERROR_CODES.get(status)}
    return b"data: %b\n\n" % _encode({"error": error})


def _authorized(request: RecordedRequest) -> bool:
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(credential.strip())


def _unauthorized() -> JsonReply:
    return error_reply(401, "missing or malformed Authorization: Bearer header")


def _text(content: str | list[_Part] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(part.text for part in content)


def chat_completions(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    if not _authorized(request):
        return _unauthorized()
    try:
        chat = _chat_decoder.decode(request.body)
    except msgspec.DecodeError as exc:
        return error_reply(400, str(exc))
    limit = (
        chat.max_completion_tokens if chat.max_completion_tokens is not None else chat.max_tokens
    )
    if limit is not None and limit < 1:
        return error_reply(400, "max_tokens must be at least 1", param="max_tokens")
    prompt = count_words(_text(m.content) for m in chat.messages)
    prompt += PER_MESSAGE_TOKENS * len(chat.messages)
    after = 0
    if chat.continue_final_message and chat.messages and chat.messages[-1].role == "assistant":
        after = count_words([_text(chat.messages[-1].content)])
    plan = plan_completion(behavior, limit, after=after)
    verdict = guard_verdict(chat.model, [(m.role, _text(m.content)) for m in chat.messages])
    if verdict is not None:  # a guard model classifies instead (classifier.py)
        plan = Completion((verdict,), (), False, "stop", count_words([verdict]))
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": plan.completion_tokens,
        "total_tokens": prompt + plan.completion_tokens,
    }
    if chat.stream:
        include_usage = chat.stream_options is not None and chat.stream_options.include_usage
        return _chat_stream(chat.model, plan, usage if include_usage else None)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if plan.tool_call else plan.text,
    }
    if plan.reasoning:
        message["reasoning"] = plan.reasoning_text
    if plan.tool_call:
        function = {"name": TOOL_NAME, "arguments": TOOL_ARGUMENTS}
        message["tool_calls"] = [
            {"id": answer_id("call_"), "type": "function", "function": function}
        ]
    body = {
        "id": answer_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": chat.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": plan.finish}
        ],
        "usage": usage,
    }
    return JsonReply(200, _encode(body))


def _chat_stream(model: str, plan: Completion, usage: dict[str, int] | None) -> StreamReply:
    # Chunks are spliced from bytes around a per-request prefix: this runs 700+ times a second.
    prefix = b'data: {"id":"%b","object":"chat.completion.chunk","created":%d,"model":%b' % (
        answer_id("chatcmpl-").encode(),
        int(time.time()),
        _encode(model),
    )
    open_choice = prefix + b',"choices":[{"index":0,"delta":'
    close_choice = b',"finish_reason":null}]' + (b',"usage":null}\n\n' if usage else b"}\n\n")

    def delta(fields: bytes, counted: bool = False) -> SseFrame:
        return (open_choice + fields + close_choice, counted)

    frames = [delta(b'{"role":"assistant","content":""}')]
    frames += [delta(b'{"reasoning":%b}' % _encode(f), True) for f in plan.reasoning]
    frames += [delta(b'{"content":%b}' % _encode(f), True) for f in plan.fragments]
    if plan.tool_call:
        call = {
            "index": 0,
            "id": answer_id("call_"),
            "type": "function",
            "function": {"name": TOOL_NAME, "arguments": ""},
        }
        frames.append(delta(b'{"tool_calls":[%b]}' % _encode(call)))
        frames += [
            delta(b'{"tool_calls":[{"index":0,"function":{"arguments":%b}}]}' % _encode(f), True)
            for f in TOOL_ARGUMENT_FRAGMENTS
        ]
    finish = b',"choices":[{"index":0,"delta":{},"finish_reason":"%b"}]' % plan.finish.encode()
    frames.append((prefix + finish + (b',"usage":null}\n\n' if usage else b"}\n\n"), False))
    if usage:
        frames.append((prefix + b',"choices":[],"usage":%b}\n\n' % _encode(usage), False))
    frames.append((b"data: [DONE]\n\n", False))
    return StreamReply(frames)


def embeddings(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    if not _authorized(request):
        return _unauthorized()
    try:
        asked = _embeddings_decoder.decode(request.body)
    except msgspec.DecodeError as exc:
        return error_reply(400, str(exc))
    dimensions = DEFAULT_DIMENSIONS if asked.dimensions is None else asked.dimensions
    if not 1 <= dimensions <= MAX_DIMENSIONS:
        message = f"dimensions must be between 1 and {MAX_DIMENSIONS}"
        return error_reply(400, message, param="dimensions")
    inputs = [asked.input] if isinstance(asked.input, str) else asked.input
    data = [
        {"object": "embedding", "index": i, "embedding": _wire(text, dimensions, asked)}
        for i, text in enumerate(inputs)
    ]
    tokens = count_words(inputs)
    body = {
        "object": "list",
        "data": data,
        "model": asked.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return JsonReply(200, _encode(body))


def _wire(text: str, dimensions: int, asked: _EmbeddingsRequest) -> list[float] | str:
    vector = embed(text, dimensions)
    if asked.encoding_format == "float":
        return vector
    packed = array.array("f", vector)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode()


_MODELS_BODY = _encode(
    {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "simulator"}
            for name in MODELS
        ],
    }
)


def models(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    if not _authorized(request):
        return _unauthorized()
    return JsonReply(200, _MODELS_BODY)
