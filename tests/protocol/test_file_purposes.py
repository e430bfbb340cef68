"""The purpose registry and the media type stored and served for a file."""

from __future__ import annotations

import pytest

from protocol.errors import InvalidFile
from protocol.files import PURPOSES, media_type, validator_for


def test_purposes_are_specs() -> None:
    assert set(PURPOSES) == {"fine-tune", "batch", "assistants", "vision", "user_data"}
    for purpose in PURPOSES:
        validator_for(purpose)
    with pytest.raises(ValueError):
        validator_for("fine_tune")


@pytest.mark.parametrize("purpose", ["assistants", "user_data"])
def test_assistants_and_user_data_accept_anything(purpose: str) -> None:
    validator = validator_for(purpose)
    for piece in (b"\xff\xfe\x00", b"", b"<html>", memoryview(b"x" * 100_000)):
        validator.feed(piece)
    assert validator.finish() is None


@pytest.mark.parametrize(
    ("purpose", "data"),
    [
        ("fine-tune", b"GIF89a"),
        ("batch", b'{"messages": []}'),
        ("vision", b'{"messages": []}'),
    ],
)
def test_each_purpose_checks_its_own_format(purpose: str, data: bytes) -> None:
    validator = validator_for(purpose)
    with pytest.raises(InvalidFile):
        validator.feed(data)
        validator.finish()


@pytest.mark.parametrize(
    ("validated", "filename", "expected"),
    [
        ("image/png", "photo.jpg", "image/png"),  # what the content proved wins
        ("application/jsonl", "train.txt", "application/jsonl"),
        (None, "notes.txt", "text/plain"),
        (None, "REPORT.PDF", "application/pdf"),
        (None, "data.jsonl", "application/jsonl"),
        (None, "table.csv", "text/csv"),
        (None, "readme.md", "text/markdown"),
        (None, "a.json", "application/json"),
        (None, "page.html", "application/octet-stream"),  # active content: never from our origin
        (None, "page.HTM", "application/octet-stream"),
        (None, "logo.svg", "application/octet-stream"),
        (None, "feed.xml", "application/octet-stream"),
        (None, "app.js", "application/octet-stream"),
        (None, "archive.tar.gz", "application/octet-stream"),  # an encoding, not a type
        (None, "noextension", "application/octet-stream"),
        (None, "", "application/octet-stream"),
        (None, "dir.txt/file", "application/octet-stream"),
        (None, "C:\\docs\\notes.txt", "text/plain"),
        (None, "data:text/html,<script>x</script>", "application/octet-stream"),
        (None, "data:image/png;base64,AAAA", "application/octet-stream"),
        (None, "x.unknownext", "application/octet-stream"),
    ],
)
def test_media_type(validated: str | None, filename: str, expected: str) -> None:
    assert media_type(validated, filename) == expected
