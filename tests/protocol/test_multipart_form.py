"""The multipart encoder for provider requests, read back by python-multipart (through the
bench upstream's parser)."""

from __future__ import annotations

import pytest

from bench.upstream.forms import parse_form
from protocol.multipart_form import FormEncoder


def test_fields_and_a_file_read_back_exactly() -> None:
    form = FormEncoder()
    data = b"line 1\r\n--not-the-boundary\r\n\x00\xff"
    body = (
        form.field("purpose", "fine-tune")
        + form.file_head("file", "train.jsonl", "application/jsonl")
        + data
        + form.file_end()
        + form.field("after", "é")
        + form.end()
    )
    parts = parse_form(form.content_type, body)
    assert parts is not None
    assert [(p.name, p.filename, p.data) for p in parts] == [
        ("purpose", None, b"fine-tune"),
        ("file", "train.jsonl", data),
        ("after", None, "é".encode()),
    ]


def test_each_form_has_its_own_boundary() -> None:
    assert FormEncoder().boundary != FormEncoder().boundary


@pytest.mark.parametrize("bad", ['a"b', "a\r\nContent-Type: x", "a\nb"])
def test_a_token_that_would_need_quoting_is_refused(bad: str) -> None:
    form = FormEncoder()
    with pytest.raises(ValueError):
        form.field(bad, "v")
    with pytest.raises(ValueError):
        form.file_head("file", bad, "text/plain")
