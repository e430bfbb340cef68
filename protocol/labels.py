"""Strings a client asks the gateway to keep or to look up: names, descriptions, ids of other
objects, idempotency keys, stored metadata. `Label` is such a string in a request struct
(bounded where it is used: `Annotated[Label, Meta(max_length=200)]`); `check_label` applies
the same rule to a value msgspec does not type (one entry of a relayed dict, a header).

The rule: no control character, C0 (U+0000 to U+001F, TAB and LF included), DEL (U+007F) or
C1 (U+0080 to U+009F). PostgreSQL cannot store U+0000 in text at all (SQLite stores it, so
the backends would differ), and the others have no place in a one-line label: invisible,
they break lines (LF, NEL), logs and terminals (ESC, CSI). Free text that is only relayed
to a provider (messages, prompts, instructions) is never a `Label`.
"""

from __future__ import annotations

import re
from typing import Annotated

from msgspec import Meta

from protocol.errors import invalid_request

# `(?![\s\S])` is the end of the string in Python and in JSON Schema's (ECMA 262) regexes
# alike: Python's `$` also matches before a final newline, which let "name\n" through.
CONTROL_CHARACTERS = r"\x00-\x1f\x7f-\x9f"  # a regex character class's body
NO_CONTROLS = rf"^[^{CONTROL_CHARACTERS}]*(?![\s\S])"
CONTROLS_MESSAGE = "must not contain control characters (U+0000-U+001F, U+007F-U+009F)"

Label = Annotated[str, Meta(pattern=NO_CONTROLS)]

MAX_IDEMPOTENCY_KEY_CHARS = 255
_CONTROL = re.compile(f"[{CONTROL_CHARACTERS}]")


def has_control(value: str) -> bool:
    return _CONTROL.search(value) is not None


def check_label(value: str, param: str) -> None:
    """400 naming `param` when `value` holds a control character."""
    if has_control(value):
        raise invalid_request(f"`{param}` {CONTROLS_MESSAGE}.", param=param)


def check_idempotency_key(key: str, param: str) -> None:
    """An idempotency key (chat's `metadata.idempotency_key`, the top-up's `Idempotency-Key`
    header): a label of 1 to 255 characters."""
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY_CHARS:
        raise invalid_request(
            f"`{param}` must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters.", param=param
        )
    check_label(key, param)
