"""A chat completion stream turned into the Responses API's event stream. No I/O here.

`ResponseStream` wraps the chat `FrameSource` the gateway already has for the provider
(`OpenAIFrames(ChunkRelay(...))` or `anthropic.StreamTranslator(...)`): each upstream SSE event
goes to the inner source, and the normalized `chat.completion.chunk` frames it returns become
Responses events, each an SSE frame `event: <type>\\ndata: <json>\\n\\n` whose JSON carries `type`
and a `sequence_number` counting from 0:

    response.created, response.in_progress                 (first feed, or finish if none)
    per message item: output_item.added, content_part.added, output_text.delta*,
                      output_text.done, content_part.done, output_item.done
    per tool call:    output_item.added, function_call_arguments.delta*,
                      function_call_arguments.done, output_item.done
    response.completed | response.incomplete | response.failed, then `data: [DONE]`

Items open when their first fragment arrives (so parallel tool calls interleave freely, each with
its own `output_index`) and all close, in `output_index` order, at the chunk with the
`finish_reason`; the terminal event follows in `finish()`, once the usage is known. Every
`output_item.added` gets its `output_item.done`, a broken stream included (items then
`incomplete`). A broken stream — the inner source raising, an error frame, a chunk of the wrong
shape, an end without `finish_reason` — ends with `response.failed` and `[DONE]` at once and
never raises; later input is ignored. Reasoning fragments are not forwarded (docs/responses.md).

Per chunk the work is one typed decode and one small encode spliced into precomputed bytes;
fragments are kept in lists and joined once, when their item closes.
"""

from __future__ import annotations

from collections.abc import Callable
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
    ResponseStatus,
    new_item_id,
    response_error,
    usage_from_chat,
)
from protocol.responses.stream_shapes import (
    ChatFrames,
    Chunk,
    ItemEvent,
    LifecycleEvent,
    PartEvent,
    ToolCallDelta,
)
from protocol.sse import DONE, SSEEvent
from protocol.usage import Usage

_decode_chunk = msgspec.json.Decoder(Chunk).decode
_encode = msgspec.json.Encoder().encode

_INCOMPLETE = {
    "length": IncompleteDetails(reason="max_output_tokens"),
    "content_filter": IncompleteDetails(reason="content_filter"),
}
_ENDED_EARLY = "The upstream stream ended before the answer was complete; retry the request."
_MALFORMED = "The upstream sent a stream chunk of the wrong shape; retry the request."


def _frame(kind: str, payload: bytes) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"


class _Part:
    """One content part of the message item: `output_text` or `refusal`."""

    __slots__ = ("delta_head", "fragments", "index", "kind")

    def __init__(self, kind: str, index: int, item_id: str, output_index: int) -> None:
        self.kind = kind  # "output_text" | "refusal"
        self.index = index
        self.fragments: list[str] = []
        event = "response.output_text.delta" if kind == "output_text" else "response.refusal.delta"
        # `{"type":..., "item_id":..., "output_index":..., "content_index":..., "delta":` + ...
        head = {
            "type": event,
            "item_id": item_id,
            "output_index": output_index,
            "content_index": index,
        }
        self.delta_head = b"event: " + event.encode() + b"\ndata: " + _encode(head)[:-1]

    def build(self) -> ContentPart:
        text = "".join(self.fragments)
        return OutputText(text) if self.kind == "output_text" else OutputRefusal(text)


class _Message:
    __slots__ = ("id", "output_index", "parts", "status")

    def __init__(self, output_index: int) -> None:
        self.id = new_item_id("msg")
        self.output_index = output_index
        self.parts: dict[str, _Part] = {}
        self.status: ItemStatus = "in_progress"

    def build(self) -> OutputMessage:
        parts = sorted(self.parts.values(), key=lambda p: p.index)
        return OutputMessage(id=self.id, status=self.status, content=[p.build() for p in parts])


class _Call:
    __slots__ = ("arguments", "call_id", "delta_head", "id", "name", "output_index", "status")

    def __init__(self, output_index: int, call_id: str, name: str) -> None:
        self.id = new_item_id("fc")
        self.output_index = output_index
        self.call_id = call_id
        self.name = name
        self.arguments: list[str] = []
        self.status: ItemStatus = "in_progress"
        head = {
            "type": "response.function_call_arguments.delta",
            "item_id": self.id,
            "output_index": output_index,
        }
        self.delta_head = (
            b"event: response.function_call_arguments.delta\ndata: " + _encode(head)[:-1]
        )

    def build(self) -> FunctionCallItem:
        return FunctionCallItem(
            id=self.id,
            call_id=self.call_id,
            name=self.name,
            arguments="".join(self.arguments),
            status=self.status,
        )


class ResponseStream:
    """A `FrameSource` (actors.relay) emitting Responses events for a chat stream; see the
    module docstring. `usage` is the inner source's (what the caller bills); after the stream
    ends, `response` is the final response object (to store)."""

    def __init__(
        self,
        inner: ChatFrames,
        skeleton: ResponseObject,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """`clock` (Unix seconds), when given, stamps `completed_at` on a completed response."""
        self._inner = inner
        self._clock = clock
        self._skeleton = msgspec.structs.replace(
            skeleton, status="in_progress", output=[], usage=None, error=None
        )
        self._seq = 0
        self._started = False
        self._closed = False  # items closed (finish_reason seen, or the stream broke)
        self._ended = False  # the terminal event and DONE sent
        self._finish_reason: str | None = None
        self._message: _Message | None = None
        self._calls: dict[int, _Call] = {}
        self._items: list[_Message | _Call] = []  # by output_index
        self._final: ResponseObject | None = None
        self._deltas = 0

    # --- FrameSource ---------------------------------------------------------------------------

    @property
    def usage(self) -> Usage | None:
        return self._inner.usage

    @property
    def finished(self) -> bool:
        """The answer reached its end (or the stream already failed and was closed)."""
        return self._ended or self._inner.finished

    def feed(self, event: SSEEvent) -> list[bytes]:
        if self._ended:
            return []
        out = self._start() if not self._started else []
        try:
            frames = self._inner.feed(event)
        except UpstreamMalformed as exc:
            return out + self.fail(f"The upstream stream failed: {exc}", code="upstream_error")
        except (ValueError, RecursionError):  # a parser's error on hostile input (deep nesting)
            return out + self.fail(_MALFORMED, code="upstream_error")
        for frame in frames:
            self._translate(frame, out)
            if self._ended:
                break
        return out

    def finish(self) -> list[bytes]:
        """The end: the terminal event (with usage) and `[DONE]`. Once only."""
        if self._ended:
            return []
        out = self._start() if not self._started else []
        self._inner.finish()  # its closing frames (usage chunk, DONE) carry nothing new
        if self._finish_reason is None:
            return out + self.fail(_ENDED_EARLY, code="upstream_error")
        incomplete = _INCOMPLETE.get(self._finish_reason)
        status: ResponseStatus = "completed" if incomplete is None else "incomplete"
        self._final = self._snapshot(status, incomplete_details=incomplete)
        if incomplete is None and self._clock is not None:
            self._final.completed_at = int(self._clock())
        kind = "response.completed" if incomplete is None else "response.incomplete"
        out.append(self._lifecycle(kind, self._final))
        out.append(DONE)
        self._ended = True
        return out

    # --- the rest of the interface -------------------------------------------------------------

    def fail(self, message: str, *, code: str = "upstream_error") -> list[bytes]:
        """End the stream now as `response.failed` (open items closed `incomplete`), then
        `[DONE]`: for the caller when the transport breaks. Nothing once the stream ended."""
        if self._ended:
            return []
        out = self._start() if not self._started else []
        if not self._closed:
            self._close_items(out, incomplete=True)
        self._final = self._snapshot("failed", error=message, code=code)
        out.append(self._lifecycle("response.failed", self._final))
        out.append(DONE)
        self._ended = True
        return out

    def cut(self, message: str, *, code: str) -> list[bytes]:
        """End the stream now as `response.failed` with no output, then `[DONE]`, whatever
        was fed: a plugin cut the stream (services/plugins/stream_guard.py), so text it held
        back must not go out again in a `.done` event or the response's `output`."""
        self._ended = True
        failed = msgspec.structs.replace(
            self._skeleton, status="failed", output=[], error=response_error(message, code)
        )
        return [self._lifecycle("response.failed", failed), DONE]

    @property
    def deltas(self) -> int:
        """Text and argument fragments forwarded so far (for a usage estimate when the stream
        ends without the upstream's usage)."""
        return self._deltas

    @property
    def ended(self) -> bool:
        """The terminal event and `[DONE]` were emitted."""
        return self._ended

    @property
    def response(self) -> ResponseObject:
        """The final response once the stream ended; before that, a snapshot of it so far
        (status `in_progress`, the items opened until now)."""
        if self._final is not None:
            return self._final
        return self._snapshot("in_progress")

    # --- translation ---------------------------------------------------------------------------

    def _start(self) -> list[bytes]:
        self._started = True
        return [
            self._lifecycle("response.created", self._skeleton),
            self._lifecycle("response.in_progress", self._skeleton),
        ]

    def _translate(self, frame: bytes, out: list[bytes]) -> None:
        if not frame.startswith(b"data: {"):
            return  # DONE, or anything that is not a chunk
        try:
            chunk = _decode_chunk(frame[6:])
        except (ValueError, RecursionError):  # msgspec's DecodeError and ValidationError
            out += self.fail(_MALFORMED, code="upstream_error")
            return
        if chunk.error is not None:
            message, code = _error_of(chunk.error)
            out += self.fail(message, code=code)
            return
        if not chunk.choices or self._closed:
            return  # a usage chunk, or something after the finish
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # Responses has a single answer
            delta = choice.delta
            if delta is not None:
                if delta.content:
                    self._text("output_text", delta.content, out)
                if delta.refusal:
                    self._text("refusal", delta.refusal, out)
                if delta.tool_calls:
                    for call in delta.tool_calls:
                        self._tool_call(call, out)
            if choice.finish_reason is not None:
                self._finish_reason = choice.finish_reason
                self._close_items(out, incomplete=False)

    def _text(self, kind: str, fragment: str, out: list[bytes]) -> None:
        message = self._message
        if message is None:
            message = self._message = _Message(len(self._items))
            self._items.append(message)
            out.append(
                self._item_event(
                    "response.output_item.added", message.output_index, message.build()
                )
            )
        part = message.parts.get(kind)
        if part is None:
            part = message.parts[kind] = _Part(
                kind, len(message.parts), message.id, message.output_index
            )
            empty: ContentPart = OutputText("") if kind == "output_text" else OutputRefusal("")
            out.append(self._part_event("response.content_part.added", message, part, empty))
        part.fragments.append(fragment)
        self._deltas += 1
        out.append(
            part.delta_head
            + (b',"delta":' + _encode(fragment))
            + (b',"logprobs":[]' if kind == "output_text" else b"")
            + (b',"sequence_number":%d}\n\n' % self._next())
        )

    def _tool_call(self, delta: ToolCallDelta, out: list[bytes]) -> None:
        function = delta.function
        call = self._calls.get(delta.index)
        if call is None:
            call_id = delta.id or new_item_id("call")
            name = (function.name if function is not None else None) or ""
            call = self._calls[delta.index] = _Call(len(self._items), call_id, name)
            self._items.append(call)
            out.append(
                self._item_event("response.output_item.added", call.output_index, call.build())
            )
        elif function is not None and function.name and not call.name:
            call.name = function.name
        if function is not None and function.arguments:
            call.arguments.append(function.arguments)
            self._deltas += 1
            out.append(
                call.delta_head
                + (b',"delta":' + _encode(function.arguments))
                + (b',"sequence_number":%d}\n\n' % self._next())
            )

    def _close_items(self, out: list[bytes], *, incomplete: bool) -> None:
        """The done events of every open item, in output order. On a truncated answer
        (`finish_reason` length or content_filter) the last item is `incomplete`; on a broken
        stream, every item."""
        self._closed = True
        truncated = self._finish_reason in _INCOMPLETE
        last = len(self._items) - 1
        for position, item in enumerate(self._items):
            cut = incomplete or (truncated and position == last)
            item.status = "incomplete" if cut else "completed"
            if isinstance(item, _Message):
                self._close_message(item, out)
            else:
                arguments = "".join(item.arguments)
                done = {
                    "type": "response.function_call_arguments.done",
                    "sequence_number": self._next(),
                    "item_id": item.id,
                    "name": item.name,
                    "output_index": item.output_index,
                    "arguments": arguments,
                }
                out.append(_frame("response.function_call_arguments.done", _encode(done)))
                built = item.build()
                out.append(self._item_event("response.output_item.done", item.output_index, built))

    def _close_message(self, message: _Message, out: list[bytes]) -> None:
        for part in sorted(message.parts.values(), key=lambda p: p.index):
            built = part.build()
            if isinstance(built, OutputText):
                done: dict[str, Any] = {
                    "type": "response.output_text.done",
                    "sequence_number": self._next(),
                    "item_id": message.id,
                    "output_index": message.output_index,
                    "content_index": part.index,
                    "text": built.text,
                    "logprobs": [],
                }
                out.append(_frame("response.output_text.done", _encode(done)))
            else:
                done = {
                    "type": "response.refusal.done",
                    "sequence_number": self._next(),
                    "item_id": message.id,
                    "output_index": message.output_index,
                    "content_index": part.index,
                    "refusal": built.refusal,
                }
                out.append(_frame("response.refusal.done", _encode(done)))
            out.append(self._part_event("response.content_part.done", message, part, built))
        out.append(
            self._item_event("response.output_item.done", message.output_index, message.build())
        )

    # --- events --------------------------------------------------------------------------------

    def _next(self) -> int:
        seq = self._seq
        self._seq = seq + 1
        return seq

    def _lifecycle(self, kind: str, response: ResponseObject) -> bytes:
        return _frame(kind, _encode(LifecycleEvent(kind, self._next(), response)))

    def _item_event(self, kind: str, output_index: int, item: OutputItem) -> bytes:
        return _frame(kind, _encode(ItemEvent(kind, self._next(), output_index, item)))

    def _part_event(self, kind: str, message: _Message, part: _Part, built: ContentPart) -> bytes:
        event = PartEvent(kind, self._next(), message.id, message.output_index, part.index, built)
        return _frame(kind, _encode(event))

    def _snapshot(
        self,
        status: ResponseStatus,
        *,
        incomplete_details: IncompleteDetails | None = None,
        error: str | None = None,
        code: str | None = None,
    ) -> ResponseObject:
        usage = self._inner.usage
        return msgspec.structs.replace(
            self._skeleton,
            status=status,
            output=[item.build() for item in self._items],
            usage=usage_from_chat(usage) if usage is not None else None,
            incomplete_details=incomplete_details,
            error=response_error(error, code) if error is not None else None,
        )

    def __repr__(self) -> str:
        return (
            f"ResponseStream(id={self._skeleton.id!r}, seq={self._seq}, items={len(self._items)}, "
            f"finish_reason={self._finish_reason!r}, ended={self._ended})"
        )


def _error_of(error: object) -> tuple[str, str]:
    """Message and code of an error frame's `error` (protocol.openai_chat.error_frame)."""
    message, code = "The upstream stream failed.", "upstream_error"
    if isinstance(error, dict):
        text, kind = error.get("message"), error.get("code")
        if isinstance(text, str) and text:
            message = text[:500]
        if isinstance(kind, str) and kind:
            code = kind
    elif isinstance(error, str) and error:
        message = error[:500]
    return message, code
