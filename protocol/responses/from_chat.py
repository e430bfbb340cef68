"""A chat completion answer turned into a Responses API response object. No I/O here.

The input is the gateway's normalized `chat.completion` body (an OpenAI-compatible upstream's,
or `protocol.anthropic.from_messages_response`'s for Anthropic). Only its first choice counts
(Responses has no `n`). Text becomes one `message` item with one `output_text` part (a
`refusal` becomes a `refusal` part); each tool call becomes a `function_call` item, in order,
with the chat tool call id as `call_id`. Reasoning is not carried over (docs/responses.md).

An answer that is not a chat completion raises `UpstreamMalformed` — never a KeyError or
TypeError — which the caller answers as a 502.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.errors import UpstreamMalformed
from protocol.responses.objects import (
    ContentPart,
    FunctionCallItem,
    IncompleteDetails,
    ItemStatus,
    OutputItem,
    OutputMessage,
    OutputRefusal,
    OutputText,
    ResponseObject,
    ResponseUsage,
    new_item_id,
    usage_from_chat,
)
from protocol.usage import Usage, usage_from_object


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | dict[str, Any] | list[Any] | None = None


class _ToolCall(msgspec.Struct):
    function: _Function
    id: str | None = None
    type: str | None = None


class _Message(msgspec.Struct):
    content: str | list[Any] | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    message: _Message
    index: int = 0
    finish_reason: str | None = None


class _Completion(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: Any = None  # read leniently (protocol.usage.usage_from_object)
    error: Any = None


_decode = msgspec.json.Decoder(_Completion).decode
_encode = msgspec.json.Encoder().encode

# The finish reasons that make a response `incomplete` (every other one completes it).
_INCOMPLETE: dict[str, IncompleteDetails] = {
    "length": IncompleteDetails(reason="max_output_tokens"),
    "max_tokens": IncompleteDetails(reason="max_output_tokens"),
    "content_filter": IncompleteDetails(reason="content_filter"),
}


def response_from_chat(
    chat: bytes,
    skeleton: ResponseObject,
    *,
    usage: Usage | None = None,
    completed_at: int | None = None,
) -> ResponseObject:
    """`skeleton` completed with the answer in `chat`: output items, usage, status.

    `usage`, when given (what the caller billed), wins over the body's `usage`;
    `completed_at` (Unix seconds) is set on a completed response. Raises
    `UpstreamMalformed` when `chat` is not a chat completion with at least one choice.
    """
    try:
        completion = _decode(chat)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise UpstreamMalformed(f"upstream answer is not a chat completion: {exc}") from None
    except UnicodeDecodeError:
        raise UpstreamMalformed("upstream answer is not valid UTF-8") from None
    except RecursionError:  # an `Any` field (usage, error, content parts) nested too deep
        raise UpstreamMalformed("upstream answer is nested too deeply") from None
    if completion.error is not None:
        raise UpstreamMalformed(f"upstream answered with an error: {_error_text(completion.error)}")
    if not completion.choices:
        raise UpstreamMalformed("upstream answer has no choices")
    choice = min(completion.choices, key=lambda c: c.index)
    message = choice.message
    text = _text(message.content)
    items: list[OutputItem] = []
    parts: list[ContentPart] = []
    if text:
        parts.append(OutputText(text))
    if message.refusal:
        parts.append(OutputRefusal(message.refusal))
    if parts:
        items.append(OutputMessage(id=new_item_id("msg"), status="completed", content=parts))
    for call in message.tool_calls or ():
        items.append(
            FunctionCallItem(
                id=new_item_id("fc"),
                call_id=call.id or new_item_id("call"),
                name=call.function.name or "",
                arguments=_arguments(call.function.arguments),
                status="completed",
            )
        )
    incomplete = _INCOMPLETE.get(choice.finish_reason or "")
    if incomplete is not None and items:
        items[-1] = _mark_incomplete(items[-1])
    reported = usage if usage is not None else usage_from_object(completion.usage)
    return msgspec.structs.replace(
        skeleton,
        status="completed" if incomplete is None else "incomplete",
        completed_at=completed_at if incomplete is None else None,
        incomplete_details=incomplete,
        error=None,
        output=items,
        usage=_usage(reported, completion.usage),
    )


def _text(content: str | list[Any] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    # Some OpenAI-compatible servers answer with content parts: keep the text ones.
    texts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in ("text", "output_text"):
            value = part.get("text")
            if isinstance(value, str):
                texts.append(value)
    return "".join(texts)


def _arguments(arguments: str | dict[str, Any] | list[Any] | None) -> str:
    """Tool call arguments as the JSON text Responses carries (some servers send an object)."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return _encode(arguments).decode()


def _mark_incomplete(item: OutputItem) -> OutputItem:
    status: ItemStatus = "incomplete"
    return msgspec.structs.replace(item, status=status)


def _usage(usage: Usage | None, raw: object) -> ResponseUsage | None:
    if usage is None:
        return None
    out = usage_from_chat(usage)
    if isinstance(raw, dict):
        out.input_tokens_details.cached_tokens = _detail(
            raw, "prompt_tokens_details", "cached_tokens"
        )
        out.output_tokens_details.reasoning_tokens = _detail(
            raw, "completion_tokens_details", "reasoning_tokens"
        )
    return out


def _detail(raw: dict[str, Any], group: str, name: str) -> int:
    details = raw.get(group)
    value = details.get(name) if isinstance(details, dict) else None
    return value if type(value) is int and value > 0 else 0


def _error_text(error: object) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message:
            return message[:300]
    if isinstance(error, str) and error:
        return error[:300]
    return "no message"
