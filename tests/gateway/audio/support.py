"""The audio tests' rig: the inference rig (a real gateway and the simulated upstream on
loopback sockets) with audio models, and helpers for forms and raw uploads."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import openai
import trio

from bench.upstream.audio_routes import Upload, parse_form, wav_header
from bench.upstream.behavior import RecordedRequest
from tests.inference import Rig, inference_rig

TTS_PRICE = Decimal("0.015")  # per 1,000 characters
TTS_OTHER_PRICE = Decimal("0.03")
WHISPER_PRICE = Decimal("0.006")  # per minute
STT_PRICE = Decimal("0.003")
CREDIT = 100_000_000  # the rig's top-up, micro-USD
MB = 1_000_000
BOUNDARY = b"test-boundary-7f3a"

AUDIO_TOML = f"""
[[models]]
id = "tts"
provider = "sim"
upstream = "tts-1"
usd_per_1k_chars = {TTS_PRICE}

[[models]]
id = "voicebox"
provider = "sim"
upstream = "sim-tts"
usd_per_1k_chars = {TTS_OTHER_PRICE}

[[models]]
id = "whisper"
provider = "sim"
upstream = "whisper-1"
usd_per_minute = {WHISPER_PRICE}

[[models]]
id = "scribe"
provider = "sim"
upstream = "sim-transcribe"
usd_per_minute = {STT_PRICE}

[[models]]
id = "tts-unpriced"
provider = "sim"
upstream = "tts-1-hd"
"""


@asynccontextmanager
async def audio_rig(
    database_url: str, tmp_path: Path, *, extra_toml: str = "", **kwargs: Any
) -> AsyncIterator[Rig]:
    async with inference_rig(
        database_url, tmp_path, extra_toml=AUDIO_TOML + extra_toml, **kwargs
    ) as rig:
        yield rig


def sdk(rig: Rig, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=rig.gateway.url + "/v1", api_key=key or rig.key, max_retries=0, timeout=30
    )


def wav(seconds: float, rate: int = 16000) -> bytes:
    """A mono 16-bit WAV of `seconds` (pseudo-random samples)."""
    size = int(seconds * rate) * 2
    seed = hashlib.sha256(b"%d" % size).digest()
    return wav_header(size) + (seed * (size // 32 + 1))[:size]


def audio_requests(rig: Rig, path: str) -> list[RecordedRequest]:
    return [r for r in rig.upstream.requests if r.path == path]


def upstream_form(request: RecordedRequest) -> Upload:
    upload = parse_form(request.headers["content-type"], request.body)
    assert upload is not None
    return upload


# -- hand-made forms -------------------------------------------------------------------------


def field(name: str, value: str | bytes) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return (
        (
            b"--"
            + BOUNDARY
            + b'\r\nContent-Disposition: form-data; name="%s"\r\n\r\n' % name.encode()
        )
        + data
        + b"\r\n"
    )


def file_head(filename: str = "a.wav") -> bytes:
    return (
        b"--"
        + BOUNDARY
        + b'\r\nContent-Disposition: form-data; name="file"; filename="%s"\r\n' % filename.encode()
        + b"Content-Type: application/octet-stream\r\n\r\n"
    )


def file_part(data: bytes, filename: str = "a.wav") -> bytes:
    return file_head(filename) + data + b"\r\n"


def form(*parts: bytes) -> bytes:
    return b"".join(parts) + b"--" + BOUNDARY + b"--\r\n"


FORM_TYPE = "multipart/form-data; boundary=" + BOUNDARY.decode()


async def post_form(rig: Rig, path: str, body: bytes, key: str | None = None) -> Any:
    headers = {**rig.gateway.auth(key or rig.key), "content-type": FORM_TYPE}
    return await rig.gateway.client.post(path, content=body, headers=headers)


def assert_error(response: Any, status: int, code: str | None, param: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code, error
    if param is not None:
        assert error["param"] == param, error


# -- raw sockets -----------------------------------------------------------------------------


async def connect(rig: Rig) -> trio.SocketStream:
    host, port = rig.gateway.url.removeprefix("http://").split(":")
    return await trio.open_tcp_stream(host, int(port))


def upload_head(rig: Rig, path: str, *, length: int | None) -> bytes:
    framing = b"transfer-encoding: chunked" if length is None else b"content-length: %d" % length
    return (
        b"POST %s HTTP/1.1\r\nhost: t\r\nauthorization: Bearer %s\r\ncontent-type: %s\r\n%s\r\n\r\n"
        % (path.encode(), rig.key.encode(), FORM_TYPE.encode(), framing)
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n"


def filler(total: int, block: bytes) -> Iterable[bytes]:
    for _ in range(total // len(block)):
        yield block
    if total % len(block):
        yield block[: total % len(block)]
