"""Decode a JSON request body into a typed struct, or fail with a 400 naming the `param`.

Every JSON request body passes here first, including those relayed to a provider as bytes, so
this is where a body that is not UTF-8 (RFC 8259 section 8.1) is refused: msgspec checks only
the strings it decodes, and a `msgspec.Raw` or skipped field (chat `messages`) would reach the
provider unchecked.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar, get_type_hints

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


def decode_json(body: bytes, type: type[T]) -> T:
    """Validate in one pass; the error's `param` is the offending field's path (`scopes[0]`)."""
    if not body.strip():
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    require_utf8(body)
    try:
        return _decoder(type).decode(body)
    except msgspec.ValidationError as exc:
        raise _validation_error(str(exc)) from None
    except msgspec.DecodeError:
        raise invalid_request("The request body is not valid JSON.", code="invalid_json") from None
    except RecursionError:  # a field of any JSON (metadata, tools) nested thousands deep
        raise invalid_request(
            "The request body is nested too deeply.", code="invalid_json"
        ) from None


# A Decoder per type, made once: msgspec.json.decode(body, type=...) looks the type up on
# every call (0.4 µs of a 2 µs decode of a 1.7 KB chat body). The types are the code's own.
_DECODERS: dict[object, msgspec.json.Decoder[Any]] = {}


def _decoder(type: type[T]) -> msgspec.json.Decoder[T]:
    decoder = _DECODERS.get(type)
    if decoder is None:
        decoder = _DECODERS[type] = msgspec.json.Decoder(type)
    return decoder


def field_decoders(struct: type[msgspec.Struct]) -> dict[str, msgspec.json.Decoder[Any]]:
    """A decoder for each field of `struct`, by name, with the field's type and constraints:
    for `decode_field`."""
    hints = get_type_hints(struct, include_extras=True)
    return {name: msgspec.json.Decoder(hints[name]) for name in struct.__struct_fields__}


def decode_field(raw: msgspec.Raw, name: str, decoder: msgspec.json.Decoder[T]) -> T:
    """One top-level field of a body `decode_json` already decoded as
    ``dict[str, msgspec.Raw]``, from its own bytes (the rest of the body is not read again);
    errors as `decode_json`'s, with the same paths."""
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if " - at `$" in text:  # a path inside the field: `$.include_usage`
            text = text.replace(" - at `$", f" - at `$.{name}", 1)
        else:
            text = f"{text} - at `$.{name}`"
        raise _validation_error(text) from None
    except RecursionError:  # metadata nested thousands deep
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
