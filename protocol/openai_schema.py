"""The shapes of the inference routes (chat completions, embeddings) as /openapi.json shows
them. No I/O. The gateway forwards these bodies as bytes and decodes only what it acts on:
`ChatCompletionRequest` extends the struct that validates chat requests
(`openai_chat.ChatRequest`) with the fields it passes through; `EmbeddingsRequest` is the struct
that validates embeddings requests. Responses are the upstream's, with `model` rewritten.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from protocol.openai_chat import ChatRequest, Fallbacks
from protocol.usage import Usage


class ChatMessage(msgspec.Struct, omit_defaults=True):
    """One message; `content` is text or an array of content parts (text, image_url...)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ChatCompletionRequest(ChatRequest, kw_only=True):
    """A chat completion request. The gateway reads `model`, `messages` (present, non-empty),
    `stream`, `stream_options`, `max_tokens` / `max_completion_tokens` (the cost reservation)
    and `metadata` (`idempotency_key`, the gateway's own); every other field (temperature,
    tools, response_format...) is forwarded to the provider as sent."""

    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)]
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stop: str | list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    response_format: dict[str, Any] | None = None


class ChatChoice(msgspec.Struct):
    index: int
    message: ChatMessage
    finish_reason: str | None


class ChatCompletion(msgspec.Struct):
    """`object: chat.completion`; `model` is the canonical `<provider>/<upstream model>`."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None


class ChunkDelta(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChunkChoice(msgspec.Struct):
    index: int
    delta: ChunkDelta
    finish_reason: str | None


class ChatCompletionChunk(msgspec.Struct):
    """One `data:` frame of a stream (`object: chat.completion.chunk`). With
    `stream_options.include_usage`, a last chunk with empty `choices` carries `usage`. A stream
    that breaks after it started sends an error frame (`{"error": {...}}`); `data: [DONE]` ends
    every stream."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


_INPUT = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}},
        {"type": "array", "items": {"type": "integer"}},
        {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
    ],
    "description": "text, texts, or token arrays; not empty",
}


class EmbeddingsRequest(msgspec.Struct):
    """An embeddings request: the gateway reads `model` and checks `input` is there and not
    empty (its shape is the provider's to check); other fields (`encoding_format`,
    `dimensions`...) are forwarded as sent."""

    model: str
    input: Annotated[Any, msgspec.Meta(extra_json_schema=_INPUT)]
    fallbacks: Fallbacks | None = None  # the gateway's own (docs/routing.md)
    cache: bool | None = None  # the gateway's own: the response cache (docs/cache.md)


class Embedding(msgspec.Struct):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # base64 with `encoding_format: base64`


class EmbeddingList(msgspec.Struct):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: Usage | None = None
