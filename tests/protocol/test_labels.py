"""Labels (protocol/labels.py): the msgspec pattern and the function refuse the same
characters, C0, DEL and C1 controls, wherever they sit; every other character passes."""

from __future__ import annotations

import re
from typing import Annotated

import msgspec
import pytest

from protocol.decoding import decode_json
from protocol.errors import APIError
from protocol.labels import NO_CONTROLS, Label, check_idempotency_key, check_label

CONTROLS = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]]
# Everything up to U+3000 and a few beyond (surrogates cannot be in a decoded str).
OTHERS = [
    chr(c) for c in [*range(0x20, 0x7F), *range(0xA0, 0x3000), 0xFEFF, 0xFFFD, 0x1F600, 0x10FFFF]
]


class Body(msgspec.Struct):
    name: Annotated[Label, msgspec.Meta(max_length=20)]
    tags: dict[Label, Label] | None = None


@pytest.mark.parametrize("where", ["{}", "{}x", "x{}", "x{}x"])
def test_the_pattern_and_the_function_agree_on_every_character(where: str) -> None:
    pattern = re.compile(NO_CONTROLS)
    for c in CONTROLS:
        value = where.format(c)
        assert pattern.search(value) is None, repr(value)
        with pytest.raises(APIError):
            check_label(value, "name")
    for c in OTHERS:
        value = where.format(c)
        assert pattern.search(value) is not None, repr(value)
        check_label(value, "name")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"name": "a\\u0000b"}', "name"),
        (b'{"name": "trailing newline\\n"}', "name"),  # Python's `$` would let it pass
        (b'{"name": "\\u0085"}', "name"),
        (b'{"name": "a", "tags": {"k\\u001b": "v"}}', "tags"),
        (b'{"name": "a", "tags": {"k": "v\\u007f"}}', "tags"),
    ],
)
def test_a_label_with_a_control_is_400_naming_the_field(body: bytes, param: str) -> None:
    with pytest.raises(APIError) as caught:
        decode_json(body, Body)
    error = caught.value
    assert (error.status, error.param) == (400, param)
    assert (
        error.message
        == f"`{param}` must not contain control characters (U+0000-U+001F, U+007F-U+009F)."
    )


def test_labels_keep_their_other_bounds() -> None:
    assert decode_json('{"name": "Ünïcode 日本 😀"}'.encode(), Body).name == "Ünïcode 日本 😀"
    with pytest.raises(APIError) as caught:
        decode_json(b'{"name": "' + b"x" * 21 + b'"}', Body)
    assert caught.value.param == "name" and "length" in caught.value.message


@pytest.mark.parametrize("key", ["", "k" * 256, "k\x00", "k\x85"])
def test_idempotency_keys(key: str) -> None:
    with pytest.raises(APIError) as caught:
        check_idempotency_key(key, "Idempotency-Key")
    assert caught.value.param == "Idempotency-Key"
    check_idempotency_key("k" * 255, "Idempotency-Key")
