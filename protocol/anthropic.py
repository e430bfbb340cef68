"""OpenAI chat completions ⇄ Anthropic Messages: request, response and stream translation.

The client speaks OpenAI; this module rewrites its request for `POST /v1/messages` and turns the
answer (a message, or its event stream) back into `chat.completion` / `chat.completion.chunk`
following the same SPEC rules as `ChunkRelay`. No I/O here.

Errors: a client request Anthropic cannot express is a 400 `APIError` naming the `param`; a broken
or failing upstream is `UpstreamProtocolError` (shared with `protocol.openai_chat`).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import msgspec

from protocol.decoding import decode_json
from protocol.errors import invalid_request
from protocol.openai_chat import (
    CHUNK_OBJECT,
    UpstreamProtocolError,
    new_completion_id,
    usage_frame,
)
from protocol.sse import DONE, SSEEvent
from protocol.usage import Usage, overlay_usage

_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_TOOL_CHOICES = {"auto": "auto", "none": "none", "required": "any"}

# --- the OpenAI request, as far as Anthropic can express it ----------------------------------


class _Text(msgspec.Struct, tag="text", tag_field="type"):
    text: str


class _ImageURL(msgspec.Struct):
    url: str


class _Image(msgspec.Struct, tag="image_url", tag_field="type"):
    image_url: _ImageURL


class _Function(msgspec.Struct):
    name: str
    arguments: str = ""


class _ToolCall(msgspec.Struct):
    id: str
    function: _Function


class _Message(msgspec.Struct, tag_field="role"):
    pass


class _System(_Message, tag="system"):
    content: str | list[_Text]


class _Developer(_Message, tag="developer"):
    content: str | list[_Text]


class _User(_Message, tag="user"):
    content: str | list[_Text | _Image]


class _Assistant(_Message, tag="assistant"):
    content: str | list[_Text] | None = None
    tool_calls: list[_ToolCall] | None = None


class _ToolResult(_Message, tag="tool"):
    content: str | list[_Text]
    tool_call_id: str


class _FunctionDef(msgspec.Struct):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    description: str | None = None
    # A JSON schema, forwarded byte-identical. (msgspec cannot put `Raw` in a union: an empty
    # `Raw` stands for "absent".)
    parameters: msgspec.Raw = msgspec.Raw()


class _ToolDef(msgspec.Struct, tag="function", tag_field="type"):
    function: _FunctionDef


class _FunctionName(msgspec.Struct):
    name: str


class _NamedToolChoice(msgspec.Struct, tag="function", tag_field="type"):
    function: _FunctionName


_PositiveInt = Annotated[int, msgspec.Meta(ge=1)]


class _ChatBody(msgspec.Struct):
    messages: Annotated[
        list[_System | _Developer | _User | _Assistant | _ToolResult], msgspec.Meta(min_length=1)
    ]
    max_tokens: _PositiveInt | None = None
    max_completion_tokens: _PositiveInt | None = None
    stop: str | list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[_ToolDef] | None = None
    tool_choice: Literal["auto", "none", "required"] | _NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None


def to_messages_request(
    body: bytes, *, upstream_model: str, stream: bool, default_max_tokens: int = 4096
) -> bytes:
    """The Anthropic Messages request for an OpenAI chat request body (400 `APIError` if the
    body is invalid or uses something Anthropic cannot express)."""
    chat = decode_json(body, _ChatBody)
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    tool_turn: list[dict[str, Any]] | None = None  # the open user turn of tool results
    for i, message in enumerate(chat.messages):
        if isinstance(message, (_System, _Developer)):
            system.append(_plain_text(message.content))
            continue
        if isinstance(message, _ToolResult):
            content = message.content
            block = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": content if isinstance(content, str) else _text_blocks(content),
            }
            if tool_turn is None:
                tool_turn = [block]
                messages.append({"role": "user", "content": tool_turn})
            else:
                tool_turn.append(block)
            continue
        tool_turn = None
        if isinstance(message, _User):
            messages.append({"role": "user", "content": _user_content(message.content, i)})
        else:
            assert isinstance(message, _Assistant)
            messages.append({"role": "assistant", "content": _assistant_content(message, i)})
    if not messages:
        raise invalid_request(
            "`messages` must hold at least one user or assistant message.", param="messages"
        )
    request: dict[str, Any] = {
        "model": upstream_model,
        "max_tokens": chat.max_completion_tokens or chat.max_tokens or default_max_tokens,
        "messages": messages,
    }
    if system:
        request["system"] = "\n\n".join(system)
    if chat.stop:
        request["stop_sequences"] = [chat.stop] if isinstance(chat.stop, str) else chat.stop
    if chat.temperature is not None:
        request["temperature"] = chat.temperature
    if chat.top_p is not None:
        request["top_p"] = chat.top_p
    if chat.tools:
        request["tools"] = [_tool(tool.function) for tool in chat.tools]
    tool_choice = _tool_choice(chat.tool_choice, chat.parallel_tool_calls, bool(chat.tools))
    if tool_choice is not None:
        request["tool_choice"] = tool_choice
    if chat.user:
        request["metadata"] = {"user_id": chat.user}
    if stream:
        request["stream"] = True
    return msgspec.json.encode(request)


def _plain_text(content: str | list[_Text]) -> str:
    return content if isinstance(content, str) else "\n".join(part.text for part in content)


def _text_blocks(parts: list[_Text]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": part.text} for part in parts if part.text]


def _user_content(content: str | list[_Text | _Image], i: int) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if isinstance(part, _Text):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        else:
            param = f"messages[{i}].content[{j}].image_url.url"
            blocks.append({"type": "image", "source": _image_source(part.image_url.url, param)})
    return blocks


def _image_source(url: str, param: str) -> dict[str, str]:
    if url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    if url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        media_type, _, encoding = header.rpartition(";")
        if comma and encoding == "base64" and media_type and data:
            return {"type": "base64", "media_type": media_type, "data": data}
        raise invalid_request(
            "An image data URL must look like `data:<media type>;base64,<data>`.", param=param
        )
    raise invalid_request("An image URL must be an http(s) or a base64 data URL.", param=param)


def _assistant_content(message: _Assistant, i: int) -> str | list[dict[str, Any]]:
    content = message.content
    if not message.tool_calls:
        if content is None:
            raise invalid_request(
                "An assistant message needs `content` or `tool_calls`.",
                param=f"messages[{i}].content",
            )
        return content if isinstance(content, str) else _text_blocks(content)
    blocks: list[dict[str, Any]] = []
    if isinstance(content, str):
        if content:
            blocks.append({"type": "text", "text": content})
    elif content is not None:
        blocks.extend(_text_blocks(content))
    for call in message.tool_calls:
        arguments = call.function.arguments
        try:
            tool_input = msgspec.json.decode(arguments) if arguments.strip() else {}
        except msgspec.DecodeError:
            tool_input = None
        if not isinstance(tool_input, dict):
            raise invalid_request(
                "Tool call `arguments` must be a JSON object.", param=f"messages[{i}].tool_calls"
            )
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.function.name, "input": tool_input}
        )
    return blocks


def _tool(function: _FunctionDef) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": function.name}
    if function.description is not None:
        tool["description"] = function.description
    schema = function.parameters
    if len(schema) and bytes(schema) != b"null":
        tool["input_schema"] = schema
    else:
        tool["input_schema"] = {"type": "object", "properties": {}}
    return tool


def _tool_choice(
    choice: str | _NamedToolChoice | None, parallel: bool | None, has_tools: bool
) -> dict[str, Any] | None:
    if not has_tools:
        return None  # Anthropic refuses `tool_choice` without `tools`; OpenAI ignores it
    if choice is None:
        if parallel is False:
            return {"type": "auto", "disable_parallel_tool_use": True}
        return None
    if isinstance(choice, _NamedToolChoice):
        result: dict[str, Any] = {"type": "tool", "name": choice.function.name}
    else:
        result = {"type": _TOOL_CHOICES[choice]}
    if parallel is False and result["type"] != "none":
        result["disable_parallel_tool_use"] = True
    return result


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
    except msgspec.DecodeError as exc:
        raise UpstreamProtocolError(f"upstream message is malformed: {exc}") from None
    text: list[str] = []
    thinking: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for block in message.content:
        if block.type == "text":
            text.append(block.text)
        elif block.type == "thinking":
            thinking.append(block.thinking)
        elif block.type == "tool_use":
            arguments = bytes(block.input).decode() if len(block.input) else "{}"
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
    """Anthropic stream events in, SSE frames of `chat.completion.chunk`s out (SPEC's rules).

    Each chunk is a precomputed head (`id`, `created`, `model` fixed at `message_start`) + the
    encoded delta + a tail, so per-event work is one small decode and one small encode.
    """

    def __init__(self, *, model: str, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self.usage: Usage | None = None
        self.finished = False
        self.saw_done = False  # `message_stop` seen
        self.id: str | None = None
        self.created = 0
        self.chunks = 0
        self._head = b""
        self._tools: dict[int, int] = {}  # content block index -> OpenAI tool call index
        self._closed = False

    def feed(self, event: SSEEvent) -> list[bytes]:
        """One upstream event in, the frames for the client out; an `error` event raises
        `UpstreamProtocolError` carrying the upstream's message."""
        try:
            parsed = _decode_event(event.data)
        except msgspec.ValidationError as exc:
            return self._unknown(event, exc)
        except msgspec.DecodeError:
            raise UpstreamProtocolError("upstream sent a non-JSON stream event") from None
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
            reason = _FINISH_REASONS.get(parsed.delta.stop_reason, "stop")
            tail = b',"logprobs":null,"finish_reason":"' + reason.encode() + b'"}]}\n\n'
            return self._chunk({}, tail)
        if isinstance(parsed, _Error):
            raise UpstreamProtocolError(
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
        if not (self.include_usage and self.usage is not None):
            return [DONE]
        if self.id is None:
            self._start("")
        assert self.id is not None
        return [usage_frame(self.id, self.created, self.model, self.usage), DONE]

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
        except msgspec.DecodeError:
            raise UpstreamProtocolError("upstream sent a non-JSON stream event") from None
        kind = payload.get("type") if isinstance(payload, dict) else None
        if kind in _KNOWN_EVENTS:
            raise UpstreamProtocolError(f"upstream sent a malformed {kind} event: {exc}")
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
