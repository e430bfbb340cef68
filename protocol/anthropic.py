"""OpenAI chat completions ⇄ Anthropic Messages: the answer's way back, and the entry points.

The request is translated in `protocol/anthropic_request.py` (re-exported here); this module
turns the answer (a message, or its event stream) back into `chat.completion` /
`chat.completion.chunk` following the same streaming rules as `ChunkRelay`. No I/O here.

Errors: a client request Anthropic cannot express is a 400 `APIError` naming the `param`; a broken
or failing upstream is `UpstreamMalformed` (shared with `protocol.openai_chat`).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from protocol.anthropic_request import to_messages_request
from protocol.errors import UpstreamMalformed
from protocol.openai_chat import (
    CHUNK_OBJECT,
    closing_frames,
    new_completion_id,
)
from protocol.sse import SSEEvent
from protocol.usage import Usage, overlay_usage

__all__ = [
    "StreamTranslator",
    "from_messages_response",
    "to_messages_request",
    "upstream_error_message",
]

_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
# --- the Anthropic answer ----------------------------------------------------------------------


class _AnthropicUsage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None

    def to_usage(self) -> Usage:
        prompt = (
            (self.input_tokens or 0)
            + (self.cache_creation_input_tokens or 0)
            + (self.cache_read_input_tokens or 0)
        )
        return Usage.of(prompt, self.output_tokens or 0)


class _Block(msgspec.Struct):
    type: str
    text: str = ""
    thinking: str = ""
    id: str = ""
    name: str = ""
    input: msgspec.Raw = msgspec.Raw()  # empty when absent


class _MessageResponse(msgspec.Struct):
    id: str
    content: list[_Block]
    stop_reason: str | None = None
    usage: _AnthropicUsage | None = None


def from_messages_response(body: bytes, *, model: str) -> tuple[bytes, Usage]:
    """A `chat.completion` body and its usage for an Anthropic message body."""
    try:
        message = msgspec.json.decode(body, type=_MessageResponse)
    except RecursionError:
        raise UpstreamMalformed("upstream message is nested too deeply") from None
    except msgspec.DecodeError as exc:
        raise UpstreamMalformed(f"upstream message is malformed: {exc}") from None
    text: list[str] = []
    thinking: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for block in message.content:
        if block.type == "text":
            text.append(block.text)
        elif block.type == "thinking":
            thinking.append(block.thinking)
        elif block.type == "tool_use":
            try:  # msgspec leaves a Raw value's bytes unchecked
                arguments = bytes(block.input).decode() if len(block.input) else "{}"
            except UnicodeDecodeError:
                raise UpstreamMalformed("upstream tool input is not UTF-8") from None
            function = {"name": block.name, "arguments": arguments}
            tool_calls.append({"id": block.id, "type": "function", "function": function})
    reply: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(text) if text or not tool_calls else None,
    }
    if thinking:
        reply["reasoning"] = "".join(thinking)
    if tool_calls:
        reply["tool_calls"] = tool_calls
    usage = message.usage.to_usage() if message.usage is not None else Usage()
    completion = {
        "id": _completion_id(message.id),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": reply,
                "logprobs": None,
                "finish_reason": _FINISH_REASONS.get(message.stop_reason or "", "stop"),
            }
        ],
        "usage": usage,
    }
    return msgspec.json.encode(completion), usage


def _completion_id(message_id: str) -> str:
    if not message_id:
        return new_completion_id()
    return "chatcmpl-" + message_id.removeprefix("msg_")


# --- the Anthropic event stream ----------------------------------------------------------------


class _Event(msgspec.Struct, tag_field="type"):
    pass


class _StartedMessage(msgspec.Struct):
    id: str = ""
    usage: _AnthropicUsage | None = None


class _MessageStart(_Event, tag="message_start"):
    message: _StartedMessage


class _StartedBlock(msgspec.Struct):
    type: str
    id: str = ""
    name: str = ""
    text: str = ""


class _BlockStart(_Event, tag="content_block_start"):
    index: int
    content_block: _StartedBlock


class _Delta(msgspec.Struct):
    type: str
    text: str = ""
    thinking: str = ""
    partial_json: str = ""


class _BlockDelta(_Event, tag="content_block_delta"):
    index: int
    delta: _Delta


class _StopDelta(msgspec.Struct):
    stop_reason: str | None = None


class _MessageDelta(_Event, tag="message_delta"):
    delta: _StopDelta
    usage: _AnthropicUsage | None = None


class _ErrorInfo(msgspec.Struct):
    type: str = ""
    message: str = ""


class _Error(_Event, tag="error"):
    error: _ErrorInfo


class _Ignored(_Event, tag="ping"):
    pass


class _BlockStop(_Event, tag="content_block_stop"):
    pass


class _MessageStop(_Event, tag="message_stop"):
    pass


_decode_event = msgspec.json.Decoder(
    _MessageStart
    | _BlockStart
    | _BlockDelta
    | _MessageDelta
    | _Error
    | _Ignored
    | _BlockStop
    | _MessageStop
).decode
_decode_any = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode
_KNOWN_EVENTS = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
}
_OPEN_TAIL = b',"logprobs":null,"finish_reason":null}]}\n\n'


class StreamTranslator:
    """Anthropic stream events in, SSE frames of `chat.completion.chunk`s out (as `ChunkRelay`).

    Each chunk is a precomputed head (`id`, `created`, `model` fixed at `message_start`) + the
    encoded delta + a tail, so per-event work is one small decode and one small encode.
    """

    def __init__(self, *, model: str, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self.usage: Usage | None = None
        self.finished = False
        self.finish_reason: str | None = None  # the answer's, once it finished (tracing)
        self.saw_done = False  # `message_stop` seen
        self.id: str | None = None
        self.created = 0
        self.chunks = 0
        self._head = b""
        self._tools: dict[int, int] = {}  # content block index -> OpenAI tool call index
        self._closed = False

    def feed(self, event: SSEEvent) -> list[bytes]:
        """One upstream event in, the frames for the client out; an `error` event raises
        `UpstreamMalformed` carrying the upstream's message."""
        try:
            parsed = _decode_event(event.data)
        except msgspec.ValidationError as exc:
            return self._unknown(event, exc)
        except (msgspec.DecodeError, RecursionError):  # RecursionError: nested thousands deep
            raise UpstreamMalformed("upstream sent a non-JSON stream event") from None
        if isinstance(parsed, _BlockDelta):
            delta = parsed.delta
            if delta.type == "text_delta":
                return self._chunk({"content": delta.text}) if delta.text else []
            if delta.type == "thinking_delta":
                return self._chunk({"reasoning": delta.thinking}) if delta.thinking else []
            tool = self._tools.get(parsed.index)
            if delta.type == "input_json_delta" and tool is not None and delta.partial_json:
                part = {"index": tool, "function": {"arguments": delta.partial_json}}
                return self._chunk({"tool_calls": [part]})
            return []
        if isinstance(parsed, _BlockStart):
            return self._block_start(parsed)
        if isinstance(parsed, _MessageStart):
            self._start(parsed.message.id)
            if parsed.message.usage is not None:
                self.usage = overlay_usage(self.usage, parsed.message.usage.to_usage())
            return self._chunk({"content": ""})
        if isinstance(parsed, _MessageDelta):
            if parsed.usage is not None:
                self.usage = overlay_usage(self.usage, parsed.usage.to_usage())
            if parsed.delta.stop_reason is None:
                return []
            self.finished = True
            reason = self.finish_reason = _FINISH_REASONS.get(parsed.delta.stop_reason, "stop")
            tail = b',"logprobs":null,"finish_reason":"' + reason.encode() + b'"}]}\n\n'
            return self._chunk({}, tail)
        if isinstance(parsed, _Error):
            raise UpstreamMalformed(
                parsed.error.message or parsed.error.type or "upstream stream error"
            )
        if isinstance(parsed, _MessageStop):
            self.saw_done = True
        return []

    def finish(self) -> list[bytes]:
        """The closing frames: the usage chunk (if asked and known), then `DONE`. Once only."""
        if self._closed:
            return []
        self._closed = True
        if self.id is None:
            self._start("")
        assert self.id is not None
        return closing_frames(self.id, self.created, self.model, self.usage, self.include_usage)

    def _start(self, message_id: str) -> None:
        if self.id is not None:
            return
        self.id = _completion_id(message_id)
        self.created = int(time.time())
        head = {"id": self.id, "object": CHUNK_OBJECT, "created": self.created, "model": self.model}
        # `{...,"model":"m"}` -> `data: {...,"model":"m","choices":[{"index":0,"delta":`
        self._head = b"data: " + _encode(head)[:-1] + b',"choices":[{"index":0,"delta":'

    def _chunk(self, delta: dict[str, Any], tail: bytes = _OPEN_TAIL) -> list[bytes]:
        if self.id is None:
            self._start("")
        if self.chunks == 0:
            delta = {"role": "assistant", **delta}
        self.chunks += 1
        return [self._head + _encode(delta) + tail]

    def _block_start(self, event: _BlockStart) -> list[bytes]:
        block = event.content_block
        if block.type == "tool_use":
            index = self._tools[event.index] = len(self._tools)
            function = {"name": block.name, "arguments": ""}
            call = {"index": index, "id": block.id, "type": "function", "function": function}
            return self._chunk({"tool_calls": [call]})
        if block.type == "text" and block.text:
            return self._chunk({"content": block.text})
        return []

    def _unknown(self, event: SSEEvent, exc: msgspec.ValidationError) -> list[bytes]:
        try:
            payload = _decode_any(event.data)
        except (msgspec.DecodeError, RecursionError):
            raise UpstreamMalformed("upstream sent a non-JSON stream event") from None
        kind = payload.get("type") if isinstance(payload, dict) else None
        if kind in _KNOWN_EVENTS:
            raise UpstreamMalformed(f"upstream sent a malformed {kind} event: {exc}")
        return []  # an event type newer than this code: skip it, as Anthropic asks

    def __repr__(self) -> str:
        return (
            f"StreamTranslator(id={self.id!r}, chunks={self.chunks}, finished={self.finished}, "
            f"usage={self.usage!r})"
        )


def upstream_error_message(status: int, body: bytes) -> str:
    """A short message from an Anthropic or OpenAI error body; never raises."""
    try:
        payload = msgspec.json.decode(body)
    except Exception:  # any garbage an upstream may send
        payload = None
    message: object = None
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        if not (isinstance(message, str) and message.strip()):
            message = payload.get("message") or payload.get("detail")
    if isinstance(message, str) and message.strip():
        text = " ".join(message.split())
        return text if len(text) <= 300 else text[:297] + "..."
    return f"upstream returned {status}"
