"""A Responses request and its context → an OpenAI chat-completions request body. No I/O.

The context is the stored chain (each earlier response's input items, then its output items,
in order) followed by this request's input, all in the normalized item form of
protocol/responses/request.py. `instructions` go first as a system message; they belong to
this request only (a continuation does not carry earlier instructions over, as OpenAI does).

    message (user, system)     → {role, content}
    message (developer)        → {role: system, content} (every chat provider knows `system`)
    message (assistant)        → {role: assistant, content}
    function_call              → the assistant message's `tool_calls` (consecutive calls, and
                                 calls right after an assistant message, share one message)
    function_call_output       → {role: tool, tool_call_id, content}

A function_call_output must answer a function_call earlier in the context
(`check_call_ids`, 400 `unknown_call_id` otherwise): a provider would refuse it anyway, with a
less useful message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from protocol.errors import invalid_request
from protocol.responses.request import ResponsesRequest


def check_call_ids(context: Sequence[dict[str, Any]], new_input: Sequence[dict[str, Any]]) -> None:
    """400 naming `input[i].call_id` for a function_call_output of this request whose call is
    not earlier in the context (the chain, or this input)."""
    calls = {item["call_id"] for item in context if item["type"] == "function_call"}
    for i, item in enumerate(new_input):
        if item["type"] == "function_call":
            calls.add(item["call_id"])
        elif item["type"] == "function_call_output" and item["call_id"] not in calls:
            raise invalid_request(
                f"No function call with call_id {item['call_id'][:64]!r} precedes this output"
                " in the conversation.",
                param=f"input[{i}].call_id",
                code="unknown_call_id",
            )


def chat_messages(
    instructions: str | None, items: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        kind = item["type"]
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": _content(item["content"])})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}
            )
        # Output item types the gateway does not produce (none today) are not replayed.
    return messages


def _content(parts: Sequence[dict[str, Any]]) -> str | list[dict[str, str]]:
    texts = [str(p.get("text") or p.get("refusal") or "") for p in parts]
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": t} for t in texts]


def chat_request(
    request: ResponsesRequest, context: Sequence[dict[str, Any]], *, model: str
) -> dict[str, Any]:
    """The chat-completions request (as a dict) for `request` with the whole `context` (chain
    then input); `model` is the name to put in it. A stream asks for usage, always."""
    body: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request.instructions, context),
    }
    if request.tools:
        body["tools"] = request.tools
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.tool_choice is not None:
        body["tool_choice"] = request.tool_choice
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.max_output_tokens is not None:
        body["max_tokens"] = request.max_output_tokens
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def encode_chat_request(
    request: ResponsesRequest, context: Sequence[dict[str, Any]], *, model: str
) -> bytes:
    return msgspec.json.encode(chat_request(request, context, model=model))
