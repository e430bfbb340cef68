"""The simulated upstream's form parser: parts in order, and None (never an exception) for
anything that is not a whole multipart/form-data body."""

from __future__ import annotations

import pytest

from bench.upstream.forms import FormPart, parse_form

TYPE = "multipart/form-data; boundary=xx"
BODY = (
    b'--xx\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'
    b'--xx\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
    b"Content-Type: audio/wav\r\n\r\nRIFF\r\n\r\n--x\r\n--xx--\r\n"
)


def test_parts_come_in_order_with_their_filenames() -> None:
    assert parse_form(TYPE, BODY) == [
        FormPart("model", None, b"whisper-1"),
        FormPart("file", "a.wav", b"RIFF\r\n\r\n--x"),
    ]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", BODY),
        ("multipart/form-data", BODY),  # no boundary
        (TYPE, BODY[:-12]),  # truncated
        (TYPE, b"garbage"),
        (TYPE, b""),
    ],
)
def test_anything_else_is_none(content_type: str, body: bytes) -> None:
    assert parse_form(content_type, body) is None
