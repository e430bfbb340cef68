"""A provider that speaks the Responses API itself (`supports` lists `responses`): the request
forwarded with the whole context as input, built-in tools included, and its answer — JSON or
event stream — taken over as the gateway's own response. No I/O.

The gateway keeps the conversation, so the provider is asked with `store: false` and never
with a `previous_response_id`: the context goes in `input` (items as the gateway stores them,
without their ids, which only the gateway knows; item types the gateway does not replay are
left out). The answer keeps the provider's output items and usage; the response's identity
(id, model, times, `previous_response_id`, `store`, `metadata`, the request's settings) is the
gateway's skeleton. An answer that is not a response object raises `UpstreamMalformed` (a
ValueError: the caller answers 502, or the stream ends `response.failed`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from protocol.errors import UpstreamMalformed
from protocol.responses.objects import ResponseObject, response_error
from protocol.responses.request import ResponsesRequest
from protocol.sse import DONE, SSEEvent
from protocol.usage import Usage

_REPLAYED = {"message", "function_call", "function_call_output"}
_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
# The skeleton's fields that name the gateway's response, not the provider's.
_IDENTITY = (
    "id",
    "object",
    "created_at",
    "model",
    "previous_response_id",
    "store",
    "metadata",
    "instructions",
    "tools",
    "tool_choice",
)


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0


class _Answer(msgspec.Struct):
    output: list[dict[str, Any]]
    status: str = "completed"
    usage: _Usage | None = None
    incomplete_details: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


def native_request(
    request: ResponsesRequest, context: Sequence[dict[str, Any]], *, model: str
) -> bytes:
    """The provider's Responses request: the whole context as `input`, `store: false`."""
    items = []
    for item in context:
        if item["type"] not in _REPLAYED:
            continue
        items.append({k: v for k, v in item.items() if k not in ("id", "status")})
    body: dict[str, Any] = {"model": model, "input": items, "store": False}
    if request.instructions is not None:
        body["instructions"] = request.instructions
    if request.response_tools:
        body["tools"] = request.response_tools
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.tool_choice is not None or request.builtin_tools:
        body["tool_choice"] = request.response_tool_choice
    for name in ("temperature", "top_p", "max_output_tokens"):
        value = getattr(request, name)
        if value is not None:
            body[name] = value
    if request.stream:
        body["stream"] = True
    return msgspec.json.encode(body)


def _answer(value: object) -> _Answer:
    try:
        answer = msgspec.convert(value, _Answer)
    except msgspec.ValidationError as exc:
        raise UpstreamMalformed(f"upstream answer is not a response: {exc}") from None
    if not all(isinstance(item.get("type"), str) for item in answer.output):
        raise UpstreamMalformed("upstream output item without a type")
    return answer


def _merge(skeleton: ResponseObject, answer: _Answer, completed_at: int | None) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(skeleton)
    out["status"] = answer.status
    out["output"] = answer.output
    out["incomplete_details"] = answer.incomplete_details
    out["error"] = answer.error
    if answer.usage is not None:
        u = answer.usage
        total = u.input_tokens + u.output_tokens
        out["usage"] = {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "total_tokens": total,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    if answer.status == "completed":
        out["completed_at"] = completed_at
    return out


def _usage(answer: _Answer) -> Usage:
    u = answer.usage or _Usage()
    return Usage.of(u.input_tokens, u.output_tokens)


def native_response(
    body: bytes, skeleton: ResponseObject, *, completed_at: int | None
) -> tuple[dict[str, Any], Usage]:
    """The gateway's response (as JSON-able dict) and the usage to bill, from the provider's
    response object; UpstreamMalformed if it is not one."""
    try:
        value = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise UpstreamMalformed("upstream answer is not JSON") from None
    answer = _answer(value)
    return _merge(skeleton, answer, completed_at), _usage(answer)


class NativeStream:
    """A relay FrameSource for a provider's Responses event stream: each event passes through
    (`event:` and `data:` lines, its `sequence_number` kept), with every embedded `response`
    given the gateway's identity; the terminal event's response is `response`, its usage
    `usage`. A malformed event, or the relay's `fail`, ends the stream `response.failed`."""

    def __init__(self, skeleton: ResponseObject, clock: Callable[[], float]) -> None:
        self._skeleton = skeleton
        self._identity = {k: v for k, v in msgspec.to_builtins(skeleton).items() if k in _IDENTITY}
        self._clock = clock
        self._next_sequence = 0
        self._done = False
        self.response: dict[str, Any] | None = None
        self.usage: Usage | None = None
        self.deltas = 0

    @property
    def finished(self) -> bool:
        return self.response is not None

    def feed(self, event: SSEEvent) -> list[bytes]:
        if self._done or event.data == "[DONE]":
            return []
        try:
            value = msgspec.json.decode(event.data)
        except (msgspec.DecodeError, RecursionError):
            return self.fail("The upstream stream sent an event that is not JSON.", code="")
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            return self.fail("The upstream stream sent an event without a type.", code="")
        kind = value["type"]
        if kind.endswith(".delta"):
            self.deltas += 1
        embedded = value.get("response")
        if isinstance(embedded, dict):
            value["response"] = {**embedded, **self._identity}
        if kind in _TERMINAL:
            try:
                answer = _answer(embedded)
            except UpstreamMalformed as exc:
                return self.fail(str(exc), code="")
            completed_at = int(self._clock())
            self.response = _merge(self._skeleton, answer, completed_at)
            self.usage = _usage(answer)
            value["response"] = self.response
        return [self._frame(kind, value)]

    def _frame(self, kind: str, value: dict[str, Any]) -> bytes:
        seq = value.get("sequence_number")
        if not isinstance(seq, int) or seq < self._next_sequence:
            value["sequence_number"] = seq = self._next_sequence
        self._next_sequence = seq + 1
        return b"event: %b\ndata: %b\n\n" % (kind.encode(), msgspec.json.encode(value))

    def finish(self) -> list[bytes]:
        if self._done:
            return []
        self._done = True
        return [DONE]

    def fail(self, message: str, *, code: str) -> list[bytes]:
        """End the stream `response.failed` (once), then `[DONE]`."""
        if self._done:
            return []
        return self.cut(message, code=code)

    def cut(self, message: str, *, code: str) -> list[bytes]:
        """`response.failed` with no output, then `[DONE]`, whatever was fed (a plugin cut
        the stream: services/plugins/stream_guard.py)."""
        self._done = True
        failed: dict[str, Any] = msgspec.to_builtins(self._skeleton)
        failed["status"] = "failed"
        failed["error"] = msgspec.to_builtins(response_error(message, code or None))
        event = {"type": "response.failed", "response": failed}
        return [self._frame("response.failed", event), DONE]
