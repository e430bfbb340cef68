"""Stripe's form encoding, read back: `application/x-www-form-urlencoded` bodies and query
strings with nested keys (`a[b][c]=v`), lists (`a[0]=x`, `a[]=x`) and empty values (Stripe's
way to unset: `metadata[k]=`), into plain dicts, lists and strings. Pure: no I/O.

The official SDK writes brackets unescaped (`expand[0]=payment_method`) and lists always
indexed; other clients send `a[]=x` or escape the brackets, so both are read. Hostile input is
refused with FormError (the route answers 400): too many fields, keys nested too deep, a key
both a value and a hash, list indexes with gaps or out of order.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

MAX_FIELDS = 1000
MAX_DEPTH = 8
MAX_BYTES = 256 * 1024

_SEGMENTS = re.compile(r"\[([^\[\]]*)\]")
_NAME = re.compile(r"[^\[\]]+")

Form = dict[str, object]


class FormError(ValueError):
    """The body is not a form Stripe would accept; `param` names the offending key if known."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def _split(key: str) -> list[str]:
    head = _NAME.match(key)
    if head is None:
        raise FormError(f"Invalid parameter name: {key[:100]}", key[:100])
    rest = key[head.end() :]
    segments = _SEGMENTS.findall(rest)
    if "".join(f"[{s}]" for s in segments) != rest:
        raise FormError(f"Invalid parameter name: {key[:100]}", key[:100])
    if len(segments) >= MAX_DEPTH:
        raise FormError(f"Parameter nested too deeply: {key[:100]}", head.group())
    return [head.group(), *segments]


class _Node:
    """A key being built: a hash (named children) or a list (appended `[]` or indexed)."""

    __slots__ = ("children",)

    def __init__(self) -> None:
        self.children: dict[str, object] = {}


def parse_form(text: str) -> Form:
    """The nested parameters of a form body or query string. Raises FormError."""
    if len(text) > MAX_BYTES:
        raise FormError("Request body too large.")
    try:
        pairs = parse_qsl(
            text,
            keep_blank_values=True,
            strict_parsing=False,
            max_num_fields=MAX_FIELDS,
            errors="strict",
        )
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormError(f"Invalid form body: {str(exc)[:100]}") from None
    root = _Node()
    appended: dict[int, int] = {}  # id(node) -> next index for `[]`
    for key, value in pairs:
        segments = _split(key)
        node = root
        for i, segment in enumerate(segments):
            last = i == len(segments) - 1
            if segment == "":
                segment = str(appended.get(id(node), 0))
            if segment.isdigit():
                appended[id(node)] = max(appended.get(id(node), 0), int(segment) + 1)
            current = node.children.get(segment)
            if last:
                if current is not None:
                    raise FormError(f"Duplicate parameter: {key[:100]}", segments[0])
                node.children[segment] = value
            else:
                if current is None:
                    current = _Node()
                    node.children[segment] = current
                elif not isinstance(current, _Node):
                    raise FormError(f"Invalid parameter: {key[:100]}", segments[0])
                node = current
    built = _build(root)
    assert isinstance(built, dict)
    return built


def _build(node: _Node) -> object:
    children = node.children
    values = {k: _build(v) if isinstance(v, _Node) else v for k, v in children.items()}
    if values and all(k.isdigit() for k in values):
        indexes = sorted(int(k) for k in values)
        if indexes != list(range(len(indexes))):
            raise FormError("Invalid array: indexes must start at 0 and have no gaps.")
        return [values[str(i)] for i in indexes]
    return values


def encode_form(params: dict[str, object]) -> str:
    """Params as the SDK would encode them (for tests and the cost script)."""
    from urllib.parse import urlencode

    def walk(prefix: str, value: object) -> list[tuple[str, str]]:
        if isinstance(value, dict):
            return [p for k, v in value.items() for p in walk(f"{prefix}[{k}]", v)]
        if isinstance(value, list):
            return [p for i, v in enumerate(value) for p in walk(f"{prefix}[{i}]", v)]
        if isinstance(value, bool):
            return [(prefix, "true" if value else "false")]
        return [(prefix, str(value))]

    pairs = [p for k, v in params.items() for p in walk(k, v)]
    return urlencode(pairs).replace("%5B", "[").replace("%5D", "]")
