"""Decode a JSON request body into a typed struct, or fail with a 400 naming the `param`.

Every JSON request body passes here first, including those relayed to a provider as bytes, so
this is where a body that is not UTF-8 (RFC 8259 section 8.1) is refused: msgspec checks only
the strings it decodes, and a `msgspec.Raw` or skipped field (chat `messages`) would reach the
provider unchecked.
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from protocol.errors import APIError, invalid_request
from protocol.labels import CONTROLS_MESSAGE, NO_CONTROLS

T = TypeVar("T")

# msgspec's locations: "- at `$.scopes[0]`"; a dict's key "- at `key` in `$.metadata`"; a
# dict's value "- at `$.metadata[...]`" (both name the dict).
_AT_PATH = re.compile(r" - at (?:`key` in )?`\$(?P<path>[^`]*)`$")
_ANY_KEY = "[...]"
_NO_CONTROLS = f"Expected `str` matching regex {NO_CONTROLS!r}"
_FIELD = re.compile(r"field `(?P<name>[^`]+)`")


def decode_json(body: bytes, type: type[T], *, utf8_checked: bool = False) -> T:
    """Validate in one pass; the error's `param` is the offending field's path (`scopes[0]`).
    `utf8_checked`: this very body already passed here once (a second decoding of it, as the
    chat route's rewrite), so its UTF-8 check is not run twice."""
    if not body.strip():
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    if not utf8_checked:
        require_utf8(body)
    try:
        return msgspec.json.decode(body, type=type)
    except msgspec.ValidationError as exc:
        raise _validation_error(str(exc)) from None
    except msgspec.DecodeError:
        raise invalid_request("The request body is not valid JSON.", code="invalid_json") from None
    except RecursionError:  # a field of any JSON (metadata, tools) nested thousands deep
        raise invalid_request(
            "The request body is nested too deeply.", code="invalid_json"
        ) from None


def require_utf8(body: bytes) -> None:
    """400 `invalid_json` unless `body` is UTF-8. isascii() scans a word at a time (0.1 µs for
    a 1.6 KB chat body, 3 µs for 100 KB: `python -m bench.json_utf8_cost`); only a body
    with other bytes pays for the decode, which runs at a similar speed."""
    if not body.isascii():
        try:
            body.decode()
        except UnicodeDecodeError:
            raise invalid_request(
                "The request body is not valid UTF-8.", code="invalid_json"
            ) from None


def _validation_error(text: str) -> APIError:
    param: str | None = None
    match = _AT_PATH.search(text)
    if match:
        param = match.group("path").lstrip(".").replace(_ANY_KEY, "") or None
        text = text[: match.start()]
    if text == _NO_CONTROLS and param:  # protocol/labels.Label: say what the pattern means
        return invalid_request(f"`{param}` {CONTROLS_MESSAGE}.", param=param)
    field = _FIELD.search(text)
    if field:
        name = field.group("name")
        param = f"{param}.{name}" if param else name
    message = text[0].upper() + text[1:] if text else "Invalid request body."
    if param:
        message = f"{message} (at `{param}`)."
    return invalid_request(message, param=param)
