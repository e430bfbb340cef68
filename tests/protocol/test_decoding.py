"""Request bodies decoded into typed structs: every failure is a 400 in the OpenAI shape."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.decoding import decode_json
from protocol.errors import APIError


class Body(msgspec.Struct):
    model: str
    metadata: dict[str, Any] | None = None


def test_a_valid_body_decodes() -> None:
    assert decode_json(b'{"model": "m", "metadata": {"a": [1]}}', Body).metadata == {"a": [1]}


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (b"", "invalid_json", None),
        (b"{", "invalid_json", None),
        (b'{"model": 1}', None, "model"),
        # Thousands deep inside a field of any JSON: msgspec runs out of stack (RecursionError).
        (
            b'{"model": "m", "metadata": {"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}}",
            "invalid_json",
            None,
        ),
    ],
)
def test_bad_bodies_are_400(body: bytes, code: str | None, param: str | None) -> None:
    with pytest.raises(APIError) as caught:
        decode_json(body, Body)
    assert caught.value.status == 400
    assert caught.value.code == code
    assert caught.value.param == param
