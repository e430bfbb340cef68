"""POST /v1/responses: the create body, validated in full before anything is looked up or sent
(400 naming the `param` of the first bad field). No I/O.

`input` is a string (one user message) or typed items, each normalized to the form the gateway
stores and lists (`input_items`) — every item gets an id when it has none:

    message               {id, type, role, content: [{type: input_text|output_text, text}], status}
                          roles user, system, developer (input_text parts) and assistant
                          (output_text parts); a string content is one part
    function_call         {id, type, call_id, name, arguments, status}
    function_call_output  {id, type, call_id, output, status}

Anything else is refused (400 `unknown_item_type`). Built-in tools are parsed and kept
(`builtin_tools`): a provider that speaks Responses natively runs them, the translated path
refuses them (`refuse_builtin_tools`, 400 `unsupported_tool`; docs/responses.md, "Tools").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec

from protocol.decoding import decode_json
from protocol.errors import invalid_request
from protocol.ids import new_id
from protocol.labels import Label

MAX_INPUT_ITEMS = 1000
MAX_TOOLS = 128
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
BUILT_IN_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "computer_use_preview",
        "image_generation",
        "mcp",
        "local_shell",
    }
)

_Text = Annotated[str, msgspec.Meta(max_length=4_000_000)]
# Stored with the response and returned: labels, as OpenAI bounds them (16 pairs, keys up to
# 64 characters, values up to 512).
Metadata = Annotated[
    dict[
        Annotated[Label, msgspec.Meta(max_length=64)],
        Annotated[Label, msgspec.Meta(max_length=512)],
    ],
    msgspec.Meta(max_length=16),
]


class RequestBody(msgspec.Struct):
    """The create body (also its OpenAPI schema)."""

    model: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    input: str | Annotated[list[dict[str, Any]], msgspec.Meta(max_length=MAX_INPUT_ITEMS)]
    instructions: _Text | None = None
    previous_response_id: Annotated[Label, msgspec.Meta(min_length=1, max_length=128)] | None = None
    tools: Annotated[list[dict[str, Any]], msgspec.Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    max_output_tokens: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] | None = None
    parallel_tool_calls: bool | None = None
    store: bool | None = None
    metadata: Metadata | None = None
    stream: bool | None = None


# --- input items, as the client may send them -----------------------------------------------


class _InputText(msgspec.Struct, tag="input_text", tag_field="type"):
    text: _Text


class _OutputText(msgspec.Struct, tag="output_text", tag_field="type"):
    text: _Text


class _Message(msgspec.Struct):
    role: Literal["user", "assistant", "system", "developer"]
    content: _Text | Annotated[list[_InputText | _OutputText], msgspec.Meta(max_length=1000)]
    type: Literal["message"] = "message"
    id: str | None = None
    status: str | None = None


class _FunctionCall(msgspec.Struct):
    type: Literal["function_call"]
    call_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    arguments: _Text
    id: str | None = None
    status: str | None = None


class _FunctionCallOutput(msgspec.Struct):
    type: Literal["function_call_output"]
    call_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    output: _Text
    id: str | None = None
    status: str | None = None


class _FunctionTool(msgspec.Struct):
    type: Literal["function"]
    name: str
    parameters: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


_ITEM_TYPES: dict[str, type[_Message] | type[_FunctionCall] | type[_FunctionCallOutput]] = {
    "message": _Message,
    "function_call": _FunctionCall,
    "function_call_output": _FunctionCallOutput,
}


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    model: str
    input: list[dict[str, Any]]  # normalized items (module docstring), ids assigned
    instructions: str | None
    previous_response_id: str | None
    tools: list[dict[str, Any]]  # chat-completions `tools` (function tools only)
    tool_choice: str | dict[str, Any] | None  # chat-completions form
    temperature: float | None
    top_p: float | None
    max_output_tokens: int | None
    parallel_tool_calls: bool
    store: bool
    metadata: dict[str, str]
    stream: bool
    # As the client sent them, for the response object (`tools`, `tool_choice`) and for a
    # provider that speaks Responses natively.
    response_tools: list[dict[str, Any]]
    response_tool_choice: str | dict[str, Any]
    builtin_tools: list[tuple[str, str]]  # (param, type) of each built-in tool asked for


def refuse_builtin_tools(request: ResponsesRequest) -> None:
    """The translated path: 400 `unsupported_tool` naming the first built-in tool."""
    if request.builtin_tools:
        param, kind = request.builtin_tools[0]
        raise invalid_request(
            f"The built-in tool {kind!r} is not served for this model: its provider is reached"
            " by translating to chat completions, where only `function` tools exist.",
            param=param,
            code="unsupported_tool",
        )


def parse_responses_request(body: bytes) -> ResponsesRequest:
    """The validated request; APIError 400 (with `param`) for the first bad field."""
    raw = decode_json(body, RequestBody)
    items = (
        [_message_item("user", [_InputText(raw.input)])]
        if isinstance(raw.input, str)
        else [_input_item(item, i) for i, item in enumerate(raw.input)]
    )
    if not items:
        raise invalid_request("`input` must hold at least one item.", param="input")
    builtins: list[tuple[str, str]] = []
    tools, response_tools = _tools(raw.tools or [], builtins)
    names = {t["function"]["name"] for t in tools}
    tool_choice, response_choice = _tool_choice(raw.tool_choice, names, builtins)
    return ResponsesRequest(
        model=raw.model,
        input=items,
        instructions=raw.instructions,
        previous_response_id=raw.previous_response_id,
        tools=tools,
        tool_choice=tool_choice,
        temperature=raw.temperature,
        top_p=raw.top_p,
        max_output_tokens=raw.max_output_tokens,
        parallel_tool_calls=True if raw.parallel_tool_calls is None else raw.parallel_tool_calls,
        store=True if raw.store is None else raw.store,
        metadata=raw.metadata or {},
        stream=bool(raw.stream),
        response_tools=response_tools,
        response_tool_choice=response_choice,
        builtin_tools=builtins,
    )


def _convert(value: object, type_: type[Any], param: str) -> Any:
    """`value` as `type_`; a 400 whose `param` is the path below `param`."""
    try:
        return msgspec.convert(value, type=type_)
    except msgspec.ValidationError as exc:
        text = str(exc)
        path = ""
        match = re.search(r" - at `\$(?P<path>[^`]*)`$", text)
        if match:
            path = match.group("path")
            text = text[: match.start()]
        field = re.search(r"field `(?P<name>[^`]+)`", text)
        if field:
            path = f"{path}.{field.group('name')}"
        where = f"{param}{path}"
        raise invalid_request(f"{text} (at `{where}`).", param=where) from None


def _input_item(item: dict[str, Any], i: int) -> dict[str, Any]:
    param = f"input[{i}]"
    kind = item.get("type", "message" if "role" in item else None)
    item_type = _ITEM_TYPES.get(kind) if isinstance(kind, str) else None
    if item_type is None:
        raise invalid_request(
            f"Input item type {str(kind)[:64]!r} is not supported: use message, function_call"
            " or function_call_output.",
            param=f"{param}.type",
            code="unknown_item_type",
        )
    parsed = _convert(item, item_type, param)
    if isinstance(parsed, _Message):
        parts = [_InputText(parsed.content)] if isinstance(parsed.content, str) else parsed.content
        wanted = _OutputText if parsed.role == "assistant" else _InputText
        for j, part in enumerate(parts):
            if not isinstance(part, wanted):
                kind_name = "output_text" if wanted is _OutputText else "input_text"
                raise invalid_request(
                    f"A {parsed.role} message's content parts must be {kind_name}.",
                    param=f"{param}.content[{j}].type",
                )
        return _message_item(parsed.role, parts, parsed.id)
    if isinstance(parsed, _FunctionCall):
        return {
            "id": parsed.id or new_id("fc"),
            "type": "function_call",
            "call_id": parsed.call_id,
            "name": parsed.name,
            "arguments": parsed.arguments,
            "status": "completed",
        }
    assert isinstance(parsed, _FunctionCallOutput)
    return {
        "id": parsed.id or new_id("fco"),
        "type": "function_call_output",
        "call_id": parsed.call_id,
        "output": parsed.output,
        "status": "completed",
    }


def _message_item(
    role: str, parts: list[_InputText | _OutputText] | list[_InputText], item_id: str | None = None
) -> dict[str, Any]:
    item: dict[str, Any] = {"id": item_id or new_id("msg"), "type": "message", "role": role}
    if role == "assistant":
        item["content"] = [
            {"type": "output_text", "text": p.text, "annotations": []} for p in parts
        ]
        item["status"] = "completed"
    else:
        item["content"] = [{"type": "input_text", "text": p.text} for p in parts]
    return item


def _tools(
    raw: list[dict[str, Any]], builtins: list[tuple[str, str]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    chat: list[dict[str, Any]] = []
    shown: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(raw):
        kind = tool.get("type")
        if kind in BUILT_IN_TOOLS:
            builtins.append((f"tools[{i}].type", str(kind)))
            shown.append(tool)  # the provider that runs it validates the rest
            continue
        if kind != "function":
            raise invalid_request(
                f"Tool type {str(kind)[:64]!r} is not supported.",
                param=f"tools[{i}].type",
                code="unsupported_tool",
            )
        parsed: _FunctionTool = _convert(tool, _FunctionTool, f"tools[{i}]")
        if not _NAME.match(parsed.name):
            raise invalid_request(
                "A function name is 1 to 64 letters, digits, `_` or `-`.",
                param=f"tools[{i}].name",
            )
        if parsed.name in seen:
            raise invalid_request(
                f"The function {parsed.name!r} is declared twice.", param=f"tools[{i}].name"
            )
        seen.add(parsed.name)
        function: dict[str, Any] = {"name": parsed.name}
        if parsed.description is not None:
            function["description"] = parsed.description
        function["parameters"] = parsed.parameters or {"type": "object", "properties": {}}
        if parsed.strict is not None:
            function["strict"] = parsed.strict
        chat.append({"type": "function", "function": function})
        shown.append(
            {
                "type": "function",
                "name": parsed.name,
                "description": parsed.description,
                "parameters": function["parameters"],
                "strict": parsed.strict,
            }
        )
    return chat, shown


def _tool_choice(
    raw: str | dict[str, Any] | None, names: set[str], builtins: list[tuple[str, str]]
) -> tuple[str | dict[str, Any] | None, str | dict[str, Any]]:
    """The chat-completions `tool_choice` (None: leave the provider's default) and the
    response object's."""
    if raw is None:
        return None, "auto"
    if isinstance(raw, str):
        if raw not in ("auto", "none", "required"):
            raise invalid_request(
                "`tool_choice` is auto, none, required or a function.", param="tool_choice"
            )
        if raw == "required" and not names and not builtins:
            raise invalid_request(
                "`tool_choice` required needs at least one tool.", param="tool_choice"
            )
        return raw, raw
    kind = raw.get("type")
    if kind in BUILT_IN_TOOLS:
        builtins.append(("tool_choice.type", str(kind)))
        return None, raw
    name = raw.get("name")
    if kind != "function" or not isinstance(name, str):
        raise invalid_request(
            "A specific `tool_choice` is {type: function, name}.", param="tool_choice"
        )
    if name not in names:
        raise invalid_request(
            f"`tool_choice` names {name[:64]!r}, which is not among the function tools.",
            param="tool_choice.name",
        )
    return {"type": "function", "function": {"name": name}}, {"type": "function", "name": name}
