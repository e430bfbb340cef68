"""The Responses API's response object and its output items, as msgspec Structs. No I/O here.

The shapes follow OpenAI's wire format closely enough for the official `openai` SDK to parse them
unchanged (its `Response` model requires `parallel_tool_calls`, `tool_choice` and `tools`; every
other field it knows may be null). Fields without a value are encoded as JSON `null`, as OpenAI
does, never omitted: a stored response decodes back to the same object.

Output items are a tagged union on `type`, so the JSON of a stored `output` decodes back to
`OutputMessage` / `FunctionCallItem` (see `decode_output_items`).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from protocol.ids import new_id
from protocol.usage import Usage

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]

# --- output items ------------------------------------------------------------------------------


class OutputText(msgspec.Struct, tag_field="type", tag="output_text"):
    """A text part of a message; `annotations` holds citations (file_search, web_search)."""

    text: str
    annotations: list[dict[str, Any]] = []
    logprobs: list[dict[str, Any]] = []


class OutputRefusal(msgspec.Struct, tag_field="type", tag="refusal"):
    """A refusal part of a message (a chat answer's `message.refusal`)."""

    refusal: str


ContentPart = OutputText | OutputRefusal


class OutputMessage(msgspec.Struct, tag_field="type", tag="message"):
    id: str
    status: ItemStatus
    content: list[ContentPart]
    role: Literal["assistant"] = "assistant"


class FunctionCallItem(msgspec.Struct, tag_field="type", tag="function_call"):
    """A call of a custom `function` tool; the caller answers it with a `function_call_output`
    input item carrying the same `call_id`."""

    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus


OutputItem = OutputMessage | FunctionCallItem

# --- usage, errors, details --------------------------------------------------------------------


class InputTokensDetails(msgspec.Struct):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(msgspec.Struct):
    reasoning_tokens: int = 0


class ResponseUsage(msgspec.Struct):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails = msgspec.field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = msgspec.field(default_factory=OutputTokensDetails)


class ResponseError(msgspec.Struct):
    """Why a response failed. `code` is one of the SDK's codes (`server_error`,
    `rate_limit_exceeded`, ...); see `response_error`."""

    code: str
    message: str


class IncompleteDetails(msgspec.Struct):
    reason: Literal["max_output_tokens", "content_filter"]


def _text_config() -> dict[str, Any]:
    return {"format": {"type": "text"}}


# --- the response ------------------------------------------------------------------------------


class ResponseObject(msgspec.Struct, kw_only=True):
    """The API's Response (id, object, created_at, model, output, usage, metadata) plus the fields
    the openai SDK's `Response` model and `responses.stream()` accumulator read.

    The request layer builds a skeleton (status `in_progress`, empty output, the request's
    settings echoed) and the translators return filled-in copies of it.
    """

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus = "in_progress"
    background: bool = False
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem] = []
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] | None = None
    store: bool = True
    temperature: float | None = None
    text: dict[str, Any] = msgspec.field(default_factory=_text_config)
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = []
    top_p: float | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = {}

    @property
    def output_text(self) -> str:
        """All `output_text` parts of all message items, joined (as the SDK's property)."""
        return "".join(
            part.text
            for item in self.output
            if isinstance(item, OutputMessage)
            for part in item.content
            if isinstance(part, OutputText)
        )


# --- ids, codecs, conversions ------------------------------------------------------------------


def new_response_id() -> str:
    """`resp_<24 base62 characters>`."""
    return new_id("resp")


def new_item_id(prefix: str) -> str:
    """An output item id: `new_item_id("msg")` -> `msg_...`, `new_item_id("fc")` -> `fc_...`."""
    return new_id(prefix.removesuffix("_"))


_encoder = msgspec.json.Encoder()
_items_decoder = msgspec.json.Decoder(list[OutputItem])
_response_decoder = msgspec.json.Decoder(ResponseObject)


def encode_response(obj: ResponseObject) -> bytes:
    return _encoder.encode(obj)


def encode_output_items(items: list[OutputItem]) -> bytes:
    """The JSON array of `items` (what storage keeps; `decode_output_items` reads it back)."""
    return _encoder.encode(items)


def decode_output_items(raw: bytes) -> list[OutputItem]:
    """Output items from stored JSON; raises `msgspec.DecodeError` (a `ValueError`) when `raw`
    is not a JSON array of known items."""
    return _items_decoder.decode(raw)


def decode_response(raw: bytes) -> ResponseObject:
    """A response object from its JSON (`encode_response`'s output); raises
    `msgspec.DecodeError` (a `ValueError`) when it is not one."""
    return _response_decoder.decode(raw)


def usage_from_chat(usage: Usage) -> ResponseUsage:
    """Chat usage counters renamed for Responses (prompt -> input, completion -> output)."""
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens or usage.prompt_tokens + usage.completion_tokens,
    )


# The codes the openai SDK's `ResponseError` model knows; the gateway's codes map onto them.
_RATE_LIMITED = {"rate_limit_exceeded", "rate_limited", "requests"}


def response_error(message: str, code: str | None = None) -> ResponseError:
    """A failed response's `error`: rate limiting keeps `rate_limit_exceeded`, a guardrail's
    cut keeps `guardrail_blocked` (the client must tell it from a failure worth retrying),
    every other failure (`upstream_error`, `upstream_timeout`, a malformed stream) is a
    `server_error` whose message says what happened."""
    if code == "guardrail_blocked":
        return ResponseError(code=code, message=message)
    mapped = "rate_limit_exceeded" if code in _RATE_LIMITED else "server_error"
    return ResponseError(code=mapped, message=message)
