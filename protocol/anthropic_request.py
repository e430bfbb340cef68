"""OpenAI chat request → Anthropic Messages request (`POST /v1/messages`). No I/O.

A client request Anthropic cannot express is a 400 `APIError` naming the `param`. The answer's
way back is `protocol/anthropic.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from protocol.decoding import decode_json
from protocol.errors import invalid_request

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
