"""The OpenAI chat completions wire format, as much of it as the gateway reads or rewrites.

Requests and responses are forwarded as bytes: only the fields the gateway needs are decoded, and a
rewrite re-joins the top level of the original body around the one changed value (`msgspec.Raw`
keeps every other value byte-identical). `ChunkRelay` normalizes an upstream stream to the API's
chunk rules. No I/O here.

Errors: `APIError` (400) for a client's bad body; `UpstreamMalformed` when an upstream sends
something that is not the protocol (non-JSON, wrong shape, an error object mid-stream).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import msgspec

from protocol.decoding import decode_field, decode_json, field_decoders
from protocol.errors import ErrorBody, ErrorDetail, UpstreamMalformed, invalid_request
from protocol.ids import random_id_chars
from protocol.sse import DONE, data_event
from protocol.usage import Usage, usage_from_object

CHUNK_OBJECT = "chat.completion.chunk"


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


Fallbacks = Annotated[list[Annotated[str, msgspec.Meta(min_length=1)]], msgspec.Meta(max_length=5)]


class ChatRequest(msgspec.Struct):
    """The fields of a chat completion request the gateway acts on; the rest passes through."""

    model: Annotated[str, msgspec.Meta(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    metadata: dict[str, str] | None = None
    # The gateway's own: models to fall back on when every deployment of `model` failed
    # (docs/routing.md); removed before the provider sees the request.
    fallbacks: Fallbacks | None = None
    cache: bool | None = None  # the gateway's own: the response cache (docs/cache.md); removed

    @property
    def include_usage(self) -> bool:
        return self.stream and self.stream_options is not None and self.stream_options.include_usage

    @property
    def output_limit(self) -> int | None:
        """The client's cap on generated tokens (`max_completion_tokens` wins), for reservations."""
        return self.max_completion_tokens or self.max_tokens


# The top-level fields the gateway reads, each decoded from its own bytes; every other one
# (`messages` included) stays raw.
_FIELDS = field_decoders(ChatRequest)
_OPEN, _CLOSE, _WHITESPACE = ord("["), ord("]"), b" \t\r\n"


class ParsedChat:
    """A chat request decoded once: the fields the gateway acts on (`request`) and the body's
    top level kept raw (`fields`), from which `rewrite` builds the provider's body without a
    second pass over the client's bytes."""

    __slots__ = ("fields", "request")

    def __init__(self, request: ChatRequest, fields: dict[str, msgspec.Raw]) -> None:
        self.request = request
        self.fields = fields

    def rewrite(self, *, model: str, force_include_usage: bool) -> bytes:
        """See `rewrite_request`."""
        return _rewrite(dict(self.fields), model=model, force_include_usage=force_include_usage)


def parse_chat_request(body: bytes) -> ParsedChat:
    """Decode and validate in one pass over `body`; raises a 400 `APIError` naming the
    offending `param`. Only the few fields of `_READ` are decoded again, from their own bytes."""
    fields = decode_json(body, dict[str, msgspec.Raw])
    for required in ("model", "messages"):
        if required not in fields:
            raise invalid_request(f"Object missing required field `{required}`.", param=required)
    request = ChatRequest(
        **{
            name: decode_field(raw, name, _FIELDS[name])
            for name, raw in fields.items()
            if name in _FIELDS
        }
    )
    view = memoryview(fields["messages"])  # read in place: the messages are not copied
    if view[0] != _OPEN:
        raise invalid_request("`messages` must be an array.", param="messages")
    at = 1
    while view[at] in _WHITESPACE:  # a valid JSON array ends with "]": never out of range
        at += 1
    if view[at] == _CLOSE:
        raise invalid_request("`messages` must not be empty.", param="messages")
    return ParsedChat(request, fields)


CONTINUE_INSTRUCTION = (
    "Your previous message was cut off. Continue it exactly where it stopped, without"
    " repeating any of it and without any preamble."
)


def continuation_request(
    parsed: ParsedChat, *, model: str, partial: str, produced: int, native: bool
) -> bytes:
    """The request that continues a streamed answer that broke after `partial` (its text so
    far, `produced` tokens of it) on another upstream (stream failover): the conversation
    with `partial` as the assistant's last message, which an upstream that can
    (`native`: vLLM's `continue_final_message`) goes on with, and any other is asked to go on
    with (`CONTINUE_INSTRUCTION`); what is left of `max_tokens` / `max_completion_tokens`."""
    fields = dict(parsed.fields)
    messages = msgspec.json.decode(fields["messages"])
    messages.append({"role": "assistant", "content": partial})
    if native:
        fields["continue_final_message"] = msgspec.Raw(b"true")
        fields["add_generation_prompt"] = msgspec.Raw(b"false")
    else:
        messages.append({"role": "user", "content": CONTINUE_INSTRUCTION})
    fields["messages"] = msgspec.Raw(msgspec.json.encode(messages))
    for name in ("max_completion_tokens", "max_tokens"):
        limit = getattr(parsed.request, name)
        if limit is not None:
            fields[name] = msgspec.Raw(msgspec.json.encode(max(1, limit - produced)))
    return _rewrite(fields, model=model, force_include_usage=True)


def rewrite_request(body: bytes, *, model: str, force_include_usage: bool) -> bytes:
    """`body` with the top-level `model` replaced, `metadata.idempotency_key` removed (the
    gateway's own), and, if asked and the request streams, `stream_options.include_usage` set
    (other `stream_options` fields kept). A chat request parsed by `parse_chat_request` is
    rewritten by `ParsedChat.rewrite` instead, without decoding its body again."""
    fields = decode_json(body, dict[str, msgspec.Raw])
    return _rewrite(fields, model=model, force_include_usage=force_include_usage)


def _rewrite(fields: dict[str, msgspec.Raw], *, model: str, force_include_usage: bool) -> bytes:
    fields["model"] = msgspec.Raw(msgspec.json.encode(model))
    fields.pop("fallbacks", None)  # the gateway's own (docs/routing.md)
    fields.pop("cache", None)  # the gateway's own (docs/cache.md)
    stream = fields.get("stream")
    if force_include_usage and stream is not None and bytes(stream) == b"true":
        options_raw = fields.get("stream_options")
        options: dict[str, Any] = {}
        if options_raw is not None and bytes(options_raw) != b"null":
            try:
                options = msgspec.json.decode(options_raw, type=dict[str, Any])
            except msgspec.ValidationError:
                raise invalid_request(
                    "`stream_options` must be an object.", param="stream_options"
                ) from None
        options["include_usage"] = True
        fields["stream_options"] = msgspec.Raw(msgspec.json.encode(options))
    metadata = fields.get("metadata")
    if metadata is not None and b'"idempotency_key"' in bytes(metadata):
        # The gateway consumes it (docs/decisions.md); OpenAI refuses unknown metadata use.
        kept = msgspec.json.decode(metadata, type=dict[str, Any])
        kept.pop("idempotency_key", None)
        if kept:
            fields["metadata"] = msgspec.Raw(msgspec.json.encode(kept))
        else:
            del fields["metadata"]
    return msgspec.json.encode(fields)


def rewrite_model_in_object(body: bytes, model: str) -> tuple[bytes, Usage | None]:
    """A non-streamed upstream response (`chat.completion`, embeddings list) with its `model`
    replaced, and its `usage`. Raises `UpstreamMalformed` when it is not a JSON object."""
    try:
        fields = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
        usage_raw = fields.get("usage")
        usage_value = None if usage_raw is None else msgspec.json.decode(usage_raw)
    except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        raise UpstreamMalformed("upstream response is not a JSON object") from None
    fields["model"] = msgspec.Raw(msgspec.json.encode(model))
    usage = None if usage_value is None else usage_from_object(usage_value)
    return msgspec.json.encode(fields), usage


def usage_frame(chunk_id: str, created: int, model: str, usage: Usage) -> bytes:
    """The extra chunk with empty `choices` and `usage` (with `stream_options.include_usage`)."""
    chunk = {
        "id": chunk_id,
        "object": CHUNK_OBJECT,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage,
    }
    return data_event(msgspec.json.encode(chunk))


def closing_frames(
    chunk_id: str, created: int, model: str, usage: Usage | None, include_usage: bool
) -> list[bytes]:
    """The end of a stream: the usage chunk when the client asked and usage is known, then
    `DONE` (shared by the OpenAI relay and the Anthropic translator)."""
    if include_usage and usage is not None:
        return [usage_frame(chunk_id, created, model, usage), DONE]
    return [DONE]


def error_frame(message: str, *, code: str, type: str = "upstream_error") -> bytes:
    """The frame sent (before `DONE`) when a stream breaks after it started (`type`
    `server_error` when the gateway itself ended it: it was shutting down)."""
    detail = ErrorDetail(message=message, type=type, param=None, code=code)
    return data_event(msgspec.json.encode(ErrorBody(error=detail)))


def new_completion_id() -> str:
    return "chatcmpl-" + random_id_chars(24)


_decode_chunk = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode

# Finish reasons some OpenAI-compatible servers spell their own way.
_FINISH_ALIASES = {
    "eos": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}


class ChunkRelay:
    """Normalizes one upstream OpenAI-compatible stream, payload by payload, into the API's chunks.

    Every forwarded chunk carries the first upstream `id` (generated if missing), one `created`,
    `object: chat.completion.chunk` and the gateway's `model`; `delta.role` appears once per choice
    (added if the upstream omitted it, stripped if repeated); `reasoning_content` becomes
    `reasoning`; `finish_reason` is always present. Usage is captured from any chunk and never
    forwarded by `feed`: `finish` emits it, just before `DONE`, when the client asked. A caller
    may set `usage` (an estimate) before `finish` when the upstream reported none.
    """

    def __init__(self, *, model: str, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self.usage: Usage | None = None
        self.finished = False
        self.finish_reason: str | None = None  # the last choice's to finish (tracing)
        self.saw_done = False
        self.id: str | None = None
        self.created = 0
        self.chunks = 0
        self._roles: set[int] = set()
        self._closed = False
        # Stream failover (docs/routing.md): the text of choice 0 sent so far, kept only when
        # a broken stream may be continued (`keep_text`), and after `resume` the tail of it
        # that a continuation's first words may repeat (stripped once).
        self.keep_text = False
        self.text: list[str] = []
        self._overlap: str | None = None
        self._carried = 0

    def feed(self, data: str) -> list[bytes]:
        """One upstream SSE `data` payload in, the frames for the client out."""
        if data == "[DONE]":
            self.saw_done = True
            return []
        if self.saw_done:
            return []
        try:
            chunk = _decode_chunk(data)
        except (msgspec.DecodeError, RecursionError):  # RecursionError: nested thousands deep
            raise UpstreamMalformed("upstream sent a non-JSON stream event") from None
        if type(chunk) is not dict:
            raise UpstreamMalformed("upstream sent a stream event that is not an object")
        usage = chunk.pop("usage", None)  # OpenAI sends `"usage": null` on every chunk
        if usage is not None:
            self.usage = usage_from_object(usage) or self.usage
        choices = chunk.get("choices")
        if type(choices) is not list or not choices:
            if choices is not None and choices != []:
                raise UpstreamMalformed("upstream chunk `choices` is not an array")
            error = chunk.get("error")
            if error is not None:
                raise UpstreamMalformed(_error_text(error))
            return []  # a usage chunk, or an empty one (Azure's prompt_filter_results)
        if self.id is None:
            self._start(chunk.get("id"), chunk.get("created"))
        chunk["id"] = self.id
        chunk["object"] = CHUNK_OBJECT
        chunk["created"] = self.created
        chunk["model"] = self.model
        for choice in choices:
            self._normalize_choice(choice)
        self.chunks += 1
        return [data_event(_encode(chunk))]

    def resume(self, carried: int) -> None:
        """The stream broke; the next chunks continue it from another upstream: same `id`,
        `created`, `model`, no second role, and the first words repeated from what was sent
        already dropped. `usage` becomes the continuation's as reported (the caller bills
        each leg); the usage chunk the client gets counts the `carried` completion tokens of
        the legs before in `completion_tokens`, and not in `prompt_tokens` (the continuation's
        prompt holds them)."""
        self._overlap = "".join(self.text)[-_OVERLAP_CHARS:]
        self._carried = carried
        self.usage = None
        self.saw_done = False

    def finish(self) -> list[bytes]:
        """The closing frames: the usage chunk (if asked and known), then `DONE`. Once only."""
        if self._closed:
            return []
        self._closed = True
        if self.id is None:
            self._start(None, None)
        assert self.id is not None
        usage = self.usage
        if usage is not None and self._carried:
            prompt = max(0, usage.prompt_tokens - self._carried)
            usage = Usage.of(prompt, usage.completion_tokens + self._carried)
        return closing_frames(self.id, self.created, self.model, usage, self.include_usage)

    def _start(self, upstream_id: object, created: object) -> None:
        self.id = upstream_id if type(upstream_id) is str and upstream_id else new_completion_id()
        self.created = created if type(created) is int and created > 0 else int(time.time())

    def _normalize_choice(self, choice: Any) -> None:
        if type(choice) is not dict:
            raise UpstreamMalformed("upstream chunk choice is not an object")
        delta = choice.get("delta")
        if type(delta) is not dict:
            delta = choice["delta"] = {}
        index = choice.get("index", 0)
        if type(index) is not int:
            raise UpstreamMalformed("upstream chunk choice `index` is not an integer")
        if index in self._roles:
            delta.pop("role", None)
        else:
            self._roles.add(index)
            if delta.get("role") is None:
                delta.pop("role", None)
                # role leads the delta, as OpenAI sends it
                delta = choice["delta"] = {"role": "assistant", **delta}
        if self.keep_text and index == 0:
            content = delta.get("content")
            if type(content) is str and content:
                if self._overlap is not None:
                    content = delta["content"] = _without_overlap(self._overlap, content)
                    self._overlap = None
                self.text.append(content)
        if "reasoning_content" in delta:
            reasoning = delta.pop("reasoning_content")
            if delta.get("reasoning") is None and reasoning is not None:
                delta["reasoning"] = reasoning
        reason = choice.get("finish_reason")
        if reason is None:
            choice["finish_reason"] = None
        else:
            self.finished = True
            if type(reason) is str:
                reason = choice["finish_reason"] = _FINISH_ALIASES.get(reason, reason)
                self.finish_reason = reason

    def __repr__(self) -> str:
        return (
            f"ChunkRelay(id={self.id!r}, chunks={self.chunks}, finished={self.finished}, "
            f"saw_done={self.saw_done}, usage={self.usage!r})"
        )


_OVERLAP_CHARS = 200  # how far back a continuation's repeated words are looked for
_MIN_OVERLAP = 8  # shorter matches are taken as chance, not repetition


def _without_overlap(sent: str, new: str) -> str:
    """`new` less its longest start (at least `_MIN_OVERLAP` characters) that `sent` ends with:
    a continuation that repeated the last words already sent."""
    for k in range(min(len(sent), len(new)), _MIN_OVERLAP - 1, -1):
        if sent.endswith(new[:k]):
            return new[k:]
    return new


def _error_text(error: object) -> str:
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and message:
            return message
    if isinstance(error, str) and error:
        return error
    return "upstream reported an error mid-stream"
