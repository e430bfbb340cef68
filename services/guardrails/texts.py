"""Where the text is in a request or an answer of each route, so a guardrail can read it and a
redaction can rewrite it in place. Works on decoded JSON (dicts and lists from
`msgspec.json.decode`); anything not of the expected shape is skipped (the route's own
validation, or the provider, refuses it).

Request text, by route:
    chat        messages[].content (a string, or the `text` of its text parts)
    responses   instructions; input (a string, or its items' content, as chat)
    embeddings  input (a string or a list of strings; token arrays are not text)
    images      prompt
    speech      input
    rerank      query; documents (strings, or the `text` of each)
Answer text (JSON), by route:
    chat        choices[].message.content
    responses   output[].content[].text (parts of type output_text), output_text
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec


@dataclass(slots=True)
class Slot:
    """One string inside a decoded body: read it with `text`, replace it with `set`."""

    container: Any  # the dict or list holding it
    key: Any  # its key or index
    role: str = ""  # a message's role ("system", "user", "tool", ...), where it has one

    @property
    def text(self) -> str:
        value: str = self.container[self.key]
        return value

    def set(self, value: str) -> None:
        self.container[self.key] = value


def _string(container: Any, key: Any) -> Iterator[Slot]:
    if isinstance(container[key], str):
        yield Slot(container, key)


def _content(message: Any) -> Iterator[Slot]:
    """A chat message's (or a Responses item's) content: a string, or its text parts."""
    if not isinstance(message, dict) or "content" not in message:
        return
    role = message.get("role")
    role = role if isinstance(role, str) else ""
    content = message["content"]
    if isinstance(content, str):
        yield Slot(message, "content", role)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield Slot(part, "text", role)


def _chat_request(body: dict[str, Any]) -> Iterator[Slot]:
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            yield from _content(message)


def _responses_request(body: dict[str, Any]) -> Iterator[Slot]:
    if isinstance(body.get("instructions"), str):
        yield Slot(body, "instructions", "system")
    items = body.get("input")
    if isinstance(items, str):
        yield Slot(body, "input", "user")
    elif isinstance(items, list):
        for item in items:
            yield from _content(item)


def _embeddings_request(body: dict[str, Any]) -> Iterator[Slot]:
    items = body.get("input")
    if isinstance(items, str):
        yield Slot(body, "input")
    elif isinstance(items, list):
        for index in range(len(items)):
            yield from _string(items, index)


def _field(name: str) -> Callable[[dict[str, Any]], Iterator[Slot]]:
    def slots(body: dict[str, Any]) -> Iterator[Slot]:
        if name in body:
            yield from _string(body, name)

    return slots


def _rerank_request(body: dict[str, Any]) -> Iterator[Slot]:
    if "query" in body:
        yield from _string(body, "query")
    documents = body.get("documents")
    if isinstance(documents, list):
        for index, document in enumerate(documents):
            if isinstance(document, str):
                yield Slot(documents, index)
            elif isinstance(document, dict) and isinstance(document.get("text"), str):
                yield Slot(document, "text")


_REQUESTS: dict[str, Callable[[dict[str, Any]], Iterator[Slot]]] = {
    "chat": _chat_request,
    "responses": _responses_request,
    "embeddings": _embeddings_request,
    "images": _field("prompt"),
    "speech": _field("input"),
    "rerank": _rerank_request,
}


def request_slots(route: str, body: Any) -> list[Slot]:
    """The request's text, in order; [] for a route without text or a body not an object."""
    slots = _REQUESTS.get(route)
    if slots is None or not isinstance(body, dict):
        return []
    return list(slots(body))


def _chat_answer(body: dict[str, Any]) -> Iterator[Slot]:
    choices = body.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, dict):
                message = choice.get("message")
                if isinstance(message, dict) and "content" in message:
                    yield from _string(message, "content")


def _output_text(node: Any) -> Iterator[Slot]:
    """Every `text` of an `output_text` part (or the `.done` event carrying it) anywhere in a
    Responses object or stream event."""
    if isinstance(node, dict):
        kind = node.get("type")
        if kind in ("output_text", "response.output_text.done") and isinstance(
            node.get("text"), str
        ):
            yield Slot(node, "text")
        for key, value in node.items():
            if key == "output_text" and isinstance(value, str):
                yield Slot(node, key)
            elif isinstance(value, dict | list):
                yield from _output_text(value)
    elif isinstance(node, list):
        for item in node:
            yield from _output_text(item)


_ANSWERS: dict[str, Callable[[Any], Iterator[Slot]]] = {
    "chat": _chat_answer,
    "responses": _output_text,
}


def answer_slots(route: str, body: Any) -> list[Slot]:
    """The answer's text (a JSON answer, or a stream event carrying whole text), in order."""
    slots = _ANSWERS.get(route)
    if slots is None or not isinstance(body, dict):
        return []
    return list(slots(body))


def stream_delta(route: str, event: Any) -> Slot | None:
    """The text a streamed frame adds (a chat chunk's first choice's delta content, a
    Responses `output_text.delta`), or None."""
    if not isinstance(event, dict):
        return None
    if route == "chat":
        choices = event.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            delta = choices[0].get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                return Slot(delta, "content")
        return None
    if event.get("type") == "response.output_text.delta" and isinstance(event.get("delta"), str):
        return Slot(event, "delta")
    return None


class _Delta(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []


class _Event(msgspec.Struct):
    type: str = ""
    delta: str | msgspec.Raw | None = None


_chunk = msgspec.json.Decoder(_Chunk).decode
_event = msgspec.json.Decoder(_Event).decode


def delta_text(route: str, payload: bytes) -> str | None:
    """`stream_delta`'s text read from a frame's JSON without decoding the rest of it (a
    stream guard reads every frame), or None (no text, not JSON, another shape)."""
    try:
        if route == "chat":
            choices = _chunk(payload).choices
            delta = choices[0].delta if choices else None
            return delta.content if delta is not None else None
        event = _event(payload)
    except (msgspec.DecodeError, RecursionError):
        return None
    if event.type == "response.output_text.delta" and isinstance(event.delta, str):
        return event.delta
    return None
