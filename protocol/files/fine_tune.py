"""`fine-tune` files: JSONL in OpenAI's chat fine-tuning format, one example a line.

A line is an object with a non-empty `messages` array and optionally `tools`, `functions` and
`parallel_tool_calls` (other top-level fields are ignored: providers add some, e.g. metadata).
Each message:

    role          system, developer, user, assistant, tool or function
    content       a string, or an array of parts {type: text, text} / {type: image_url,
                  image_url: {url}} (vision fine-tuning); may be absent or null only on an
                  assistant message that carries `tool_calls` or `function_call`
    name          string (any role)
    weight        0 or 1, assistant only (whether the message is trained on)
    tool_calls    [{id, type: function, function: {name, arguments}}], assistant only
    function_call {name, arguments}, assistant only (the legacy form)
    tool_call_id  string

Unknown message fields are ignored (forward-compatible with fields a provider adds). At least
one assistant message per example: it is what the model is trained to produce.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from protocol.files.jsonl import JsonlValidator, line_error, quote

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


class FunctionCall(msgspec.Struct, gc=False):
    name: str
    arguments: str


class ToolCall(msgspec.Struct, gc=False):
    id: str
    type: Literal["function"]
    function: FunctionCall


class TextPart(msgspec.Struct, gc=False, tag="text", tag_field="type"):
    text: str


class ImageURL(msgspec.Struct, gc=False):
    url: str


class ImagePart(msgspec.Struct, gc=False, tag="image_url", tag_field="type"):
    image_url: ImageURL


class Message(msgspec.Struct, gc=False):
    role: str
    content: str | list[TextPart | ImagePart] | None = None
    name: str | None = None
    weight: Literal[0, 1] | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: FunctionCall | None = None
    tool_call_id: str | None = None


class Example(msgspec.Struct, gc=False):
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    functions: list[dict[str, Any]] | None = None
    parallel_tool_calls: bool | None = None


class FineTuneValidator(JsonlValidator):
    """Validates a `fine-tune` upload line by line as it streams."""

    decoder = msgspec.json.Decoder(Example)

    def _accept(self, objs: list[Example]) -> bool:
        for example in objs:
            assistant = False
            for message in example.messages:
                if message.role == "assistant":
                    assistant = True
                    if message.content is None and not (
                        message.tool_calls or message.function_call
                    ):
                        return False
                elif (
                    message.content is None
                    or message.role not in ROLES
                    or message.weight is not None
                    or message.tool_calls is not None
                    or message.function_call is not None
                ):
                    return False
            if not assistant:
                return False
        return True

    def _example(self, example: Example, number: int) -> None:
        messages = example.messages
        if not messages:
            raise line_error(number, "messages is empty")
        assistant = False
        for i, message in enumerate(messages):
            role = message.role
            if role == "assistant":
                assistant = True
                if message.content is None and not (message.tool_calls or message.function_call):
                    raise line_error(
                        number,
                        f"messages[{i}].content is missing "
                        "(an assistant message needs content, tool_calls or function_call)",
                    )
                continue
            if role not in ROLES:
                raise line_error(number, f"messages[{i}].role {quote(role)} is not a known role")
            if message.content is None:
                raise line_error(number, f"messages[{i}].content is missing")
            for field in ("weight", "tool_calls", "function_call"):
                if getattr(message, field) is not None:
                    raise line_error(
                        number, f"messages[{i}].{field} is only allowed on assistant messages"
                    )
        if not assistant:
            raise line_error(number, "messages has no assistant message")
