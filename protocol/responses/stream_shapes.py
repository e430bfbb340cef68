"""The shapes `ResponseStream` (stream.py) reads and writes: the inner chat source it wraps,
the chat chunks it reads (only what is translated; the inner source normalized the rest) and
the Responses events it writes."""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from protocol.responses.objects import ContentPart, OutputItem, ResponseObject
from protocol.sse import SSEEvent
from protocol.usage import Usage


class ChatFrames(Protocol):
    """The inner source: `actors.relay.FrameSource` (restated: protocol/ does not import
    actors/), i.e. `OpenAIFrames(ChunkRelay(...))` or `anthropic.StreamTranslator(...)`."""

    @property
    def usage(self) -> Usage | None: ...

    @property
    def finished(self) -> bool: ...

    def feed(self, event: SSEEvent) -> list[bytes]: ...

    def finish(self) -> list[bytes]: ...


# --- the chunks read (only what is translated; the inner source normalized the rest) -----------


class FunctionDelta(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: FunctionDelta | None = None


class Delta(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class Choice(msgspec.Struct):
    index: int = 0
    delta: Delta | None = None
    finish_reason: str | None = None


class Chunk(msgspec.Struct):
    choices: list[Choice] | None = None
    error: Any = None


# --- the events written ------------------------------------------------------------------------


class LifecycleEvent(msgspec.Struct):
    type: str
    sequence_number: int
    response: ResponseObject


class ItemEvent(msgspec.Struct):
    type: str
    sequence_number: int
    output_index: int
    item: OutputItem


class PartEvent(msgspec.Struct):
    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: ContentPart
