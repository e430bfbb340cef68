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


class Relayed(msgspec.Struct):
    model: str
    messages: msgspec.Raw  # kept as bytes and relayed: msgspec never decodes its strings


@pytest.mark.parametrize(
    "bad", [b"a\xffb", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80"]
)
@pytest.mark.parametrize(
    "template",
    [
        b'{"model": "%s", "messages": []}',  # decoded: msgspec raised UnicodeDecodeError (a 500)
        b'{"model": "m", "messages": [{"content": "%s"}]}',  # relayed: passed unchecked
        b'{"model": "m", "messages": [], "other": "%s"}',  # skipped: passed unchecked
    ],
)
def test_a_body_that_is_not_utf8_is_invalid_json(template: bytes, bad: bytes) -> None:
    with pytest.raises(APIError) as caught:
        decode_json(template.replace(b"%s", bad), Relayed)
    assert (caught.value.status, caught.value.code, caught.value.param) == (
        400,
        "invalid_json",
        None,
    )


def test_valid_utf8_beyond_ascii_decodes() -> None:
    body = '{"model": "é", "messages": [{"content": "日本 😀"}]}'.encode()
    decoded = decode_json(body, Relayed)
    assert decoded.model == "é" and "😀".encode() in bytes(decoded.messages)
