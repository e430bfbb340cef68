"""The 25 MB audio limit over raw sockets: a declared length past it is answered 400 before
the body is sent, a chunked one once 25 MB of file went by (the rest never read), and a 24 MB
file streams through to the provider byte for byte."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import msgspec
import pytest
import trio

from gateway.audio import FORM_OVERHEAD_BYTES
from tests.gateway.audio.support import (
    MB,
    assert_error,
    audio_requests,
    audio_rig,
    chunk,
    connect,
    field,
    file_head,
    filler,
    form,
    post_form,
    upload_head,
    upstream_form,
    wav,
)
from tests.gateway.rawhttp import Raw
from tests.inference import Rig, ledger

TRANSCRIPTIONS = "/v1/audio/transcriptions"
BLOCK = bytes(range(256)) * 256  # 64 KiB


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with audio_rig(database_url, tmp_path) as r:
        yield r


async def send_until_answered(
    rig: Rig, pieces: Iterable[bytes], *, length: int | None
) -> tuple[int | None, bytes, bytes, int]:
    """Send the head then `pieces` until the gateway answers: (status, head, body, body
    bytes sent)."""
    stream = await connect(rig)
    raw = Raw(stream)
    sent = 0
    answered = trio.Event()

    async def send() -> None:
        nonlocal sent
        try:
            await stream.send_all(upload_head(rig, TRANSCRIPTIONS, length=length))
            for piece in pieces:
                if answered.is_set():
                    return
                await stream.send_all(chunk(piece) if length is None else piece)
                sent += len(piece)
            if length is None:
                await stream.send_all(chunk(b""))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            with trio.fail_after(30):
                status, head, body = await raw.response()
            answered.set()
            nursery.cancel_scope.cancel()
    finally:
        await stream.aclose()
    return status, head, body, sent


def start() -> bytes:
    return field("model", "whisper") + file_head("big.wav")


async def test_a_declared_length_past_25_mb_is_answered_before_the_body(rig: Rig) -> None:
    first = start() + BLOCK
    status, head, body, sent = await send_until_answered(
        rig, [first], length=26 * MB + FORM_OVERHEAD_BYTES
    )
    assert sent == len(first)  # only the head and a little body
    assert status == 400 and b"connection: close" in head.lower()
    error = msgspec.json.decode(body)["error"]
    assert error["code"] == "file_too_large" and error["param"] == "file"
    assert audio_requests(rig, TRANSCRIPTIONS) == []
    assert await ledger(rig, 0) == (100_000_000, [])


async def test_a_chunked_file_past_25_mb_is_refused_on_the_way(rig: Rig) -> None:
    pieces = [start(), *filler(60 * MB, BLOCK)]
    status, head, body, sent = await send_until_answered(rig, pieces, length=None)
    assert status == 400, body
    assert msgspec.json.decode(body)["error"]["code"] == "file_too_large"
    assert 25 * MB < sent < 40 * MB  # refused once past the limit; the rest never needed
    assert await ledger(rig, 0) == (100_000_000, [])


async def test_a_file_first_past_25_mb_is_refused_on_the_way(rig: Rig) -> None:
    # Held until `model` arrives, but never past the limit: refused as it crosses it.
    pieces = [file_head("big.wav"), *filler(60 * MB, BLOCK)]
    status, head, body, sent = await send_until_answered(rig, pieces, length=None)
    assert status == 400, body
    error = msgspec.json.decode(body)["error"]
    assert error["code"] == "file_too_large" and error["param"] == "file"
    assert 25 * MB < sent < 40 * MB
    assert audio_requests(rig, TRANSCRIPTIONS) == []
    assert await ledger(rig, 0) == (100_000_000, [])


async def test_a_file_just_over_the_limit_under_a_declared_length_is_refused(rig: Rig) -> None:
    data = wav(1)[:44] + bytes(25 * MB + 1 - 44)
    r = await post_form(
        rig, TRANSCRIPTIONS, form(field("model", "whisper"), file_head() + data + b"\r\n")
    )
    assert_error(r, 400, "file_too_large", "file")


@pytest.mark.parametrize("file_first", [False, True])
async def test_a_24_mb_file_streams_through_intact(rig: Rig, file_first: bool) -> None:
    data = wav(1)[:44] + bytes(BLOCK * (24 * MB // len(BLOCK)))[: 24 * MB - 44]
    parts = [field("model", "whisper"), field("response_format", "text")]
    file = file_head() + data + b"\r\n"
    # File first (curl's order): held, encrypted on disk, until the model is known.
    body = form(file, *parts) if file_first else form(*parts, file)
    for framing in ("content-length", "chunked"):
        length = len(body) if framing == "content-length" else None
        pieces = [body[i : i + len(BLOCK)] for i in range(0, len(body), len(BLOCK))]
        status, _, answer, _ = await send_until_answered(rig, pieces, length=length)
        assert status == 200, answer
        sent = audio_requests(rig, TRANSCRIPTIONS)[-1]
        upload = upstream_form(sent)
        assert upload.file is not None and len(upload.file) == len(data)
        assert hashlib.sha256(upload.file).digest() == hashlib.sha256(data).digest()
