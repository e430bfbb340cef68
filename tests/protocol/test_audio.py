"""protocol/audio: speech request checks, form fields, WAV durations and transcript
renderings (pure functions, no I/O)."""

from __future__ import annotations

import struct
from decimal import Decimal

import msgspec
import pytest

from protocol.audio import transcript
from protocol.audio.duration import wav_duration
from protocol.audio.speech import CONTENT_TYPES, check_voice, parse_speech, upstream_body
from protocol.audio.transcription import (
    TranscriptionFields,
    check_filename,
    reserved_minutes,
    supports_translation,
)
from protocol.errors import APIError


def wav_head(data_bytes: int, byte_rate: int = 32000, extra_chunk: bytes = b"") -> bytes:
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, byte_rate // 2, byte_rate, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", min(36 + data_bytes, 0xFFFFFFFF))
        + b"WAVEfmt "
        + fmt
        + extra_chunk
        + b"data"
        + struct.pack("<I", data_bytes)
    )


def test_speech_defaults_units_and_upstream_body() -> None:
    request = parse_speech(b'{"model":"m","input":"h\\u00e9llo","voice":"v"}')
    assert request.response_format == "mp3" and request.speed == 1.0 and not request.stream
    assert request.content_type == "audio/mpeg"
    assert request.thousand_chars == Decimal("0.005")  # characters, not UTF-8 bytes
    sent = msgspec.json.decode(upstream_body(request, "tts-1"))
    assert sent == {
        "model": "tts-1",
        "input": "héllo",
        "voice": "v",
        "response_format": "mp3",
        "speed": 1.0,
    }
    assert set(CONTENT_TYPES) == {"mp3", "opus", "aac", "flac", "wav", "pcm"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"model":"m","input":"","voice":"v"}', "input"),
        (b'{"model":"m","input":"' + b"x" * 4097 + b'","voice":"v"}', "input"),
        (b'{"model":"m","input":"x","voice":"v","speed":0.2}', "speed"),
        (b'{"model":"m","input":"x","voice":"v","speed":5}', "speed"),
        (b'{"model":"m","input":"x","voice":"v","response_format":"ogg"}', "response_format"),
        (b'{"model":"m","input":"x"}', "voice"),
    ],
)
def test_speech_refusals(body: bytes, param: str) -> None:
    with pytest.raises(APIError) as caught:
        parse_speech(body)
    assert caught.value.status == 400 and caught.value.param == param


def test_voices() -> None:
    check_voice("tts-1", "alloy")
    check_voice("eleven", "anything")
    with pytest.raises(APIError):
        check_voice("tts-1-hd", "rachel")


def test_fields_and_filenames() -> None:
    fields = TranscriptionFields()
    assert fields.add("model", "whisper") is False
    assert fields.add("temperature", "1.0") is True and fields.temperature == 1.0
    assert fields.add("timestamp_granularities[]", "word") is True
    with pytest.raises(APIError):
        fields.check()  # granularities need verbose_json
    fields.add("response_format", "verbose_json")
    fields.check()
    assert fields.add("stream", "false") is False  # unknown: read, not forwarded
    for bad in ("1.5", "nan", "abc", "-0.01"):
        with pytest.raises(APIError):
            TranscriptionFields().add("temperature", bad)
    assert check_filename("Talk.MP3") == "mp3"
    for name in (None, "x", "x.ogg", "wav"):
        with pytest.raises(APIError):
            check_filename(name)
    assert reserved_minutes(60_000) == 1
    assert supports_translation("whisper-1") and not supports_translation("gpt-4o-transcribe")


def test_wav_durations() -> None:
    assert wav_duration(wav_head(64000), 44 + 64000) == 2
    # A LIST chunk before `data`, and a declared size past the file (streamed WAV): the file.
    listed = wav_head(0xFFFFFFFF, extra_chunk=b"LIST" + struct.pack("<I", 5) + b"abcde\x00")
    assert wav_duration(listed, len(listed) + 16000) == Decimal("0.5")
    assert wav_duration(b"\xff\xfb" + bytes(100), 102) is None
    assert wav_duration(wav_head(10, byte_rate=0), 54) is None
    assert wav_duration(b"RIFF", 4) is None


def test_renderings() -> None:
    raw = msgspec.json.encode(
        {
            "task": "transcribe",
            "language": "english",
            "duration": 3661.5,
            "text": "a b",
            "segments": [
                {"id": 0, "start": 0.0, "end": 1.25, "text": " a"},
                {"id": 1, "start": 3600.0, "end": 3661.5, "text": " b"},
            ],
        }
    )
    result = transcript.decode(raw)
    assert transcript.duration_seconds(result) == Decimal("3661.5")
    assert transcript.render(result, "json", raw) == (b'{"text":"a b"}', "application/json")
    assert transcript.render(result, "verbose_json", raw)[0] == raw
    assert transcript.render(result, "text", raw)[0] == b"a b\n"
    srt = transcript.render(result, "srt", raw)[0].decode()
    assert srt == "1\n00:00:00,000 --> 00:00:01,250\na\n\n2\n01:00:00,000 --> 01:01:01,500\nb\n"
    vtt = transcript.render(result, "vtt", raw)[0].decode()
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.250\na\n")
    bare = transcript.decode(b'{"text":"only"}')
    assert transcript.duration_seconds(bare) is None
    assert transcript.render(bare, "srt", b"")[0] == b"1\n00:00:00,000 --> 00:00:00,000\nonly\n"
