"""Validation memory stays bounded by the line bound and the piece, not by the file."""

from __future__ import annotations

import tracemalloc

import pytest

from protocol.files import validator_for

PIECE = 65536


def _peak(purpose: str, lines: bytes, total: int) -> int:
    validator = validator_for(purpose)
    block = lines * (PIECE * 4 // len(lines) + 1)
    tracemalloc.start()
    try:
        fed = 0
        while fed < total:
            for i in range(0, len(block), PIECE):
                validator.feed(block[i : i + PIECE])
            fed += len(block)
        validator.finish()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "line",
    [
        b'{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}\n',
        b'{"messages":[{"role":"user","content":"' + b"x" * 5000 + b'"},'
        b'{"role":"assistant","content":"yo"}]}\r\n',
    ],
    ids=["short_lines", "long_crlf_lines"],
)
def test_fine_tune_memory_does_not_grow_with_the_file(line: bytes) -> None:
    assert _peak("fine-tune", line, 8 * 1024 * 1024) < 2 * 1024 * 1024


def test_vision_memory_does_not_grow_with_the_file() -> None:
    validator = validator_for("vision")
    validator.feed(b"\xff\xd8")
    segment = b"\xff\xe1\xff\xff" + b"\0" * 65533
    tracemalloc.start()
    try:
        for _ in range(300):
            validator.feed(segment)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_batch_memory_at_the_request_limit_is_bounded_whatever_the_ids_length() -> None:
    long_id = "x" * 2000
    template = '{"custom_id":"%s-%d","method":"POST","url":"/v1/embeddings","body":{}}\n'
    data = "".join(template % (long_id, i) for i in range(50_000)).encode()  # ~100 MB of ids
    validator = validator_for("batch")
    tracemalloc.start()
    try:
        for i in range(0, len(data), PIECE):
            validator.feed(data[i : i + PIECE])
        validator.finish()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024  # digests, not the ids themselves
