"""A transcription result (the API's verbose_json: task, language, duration, text, segments and,
when asked, words) rendered in the format the client asked for. The gateway always asks the
provider for verbose_json (it carries the duration that is billed) and renders the rest here."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec


class Segment(msgspec.Struct):
    id: int
    start: float
    end: float
    text: str


class Word(msgspec.Struct):
    word: str
    start: float
    end: float


class Transcription(msgspec.Struct, omit_defaults=True):
    """The API's verbose_json transcription result, plus `words` with word granularity."""

    text: str
    task: str | None = None
    language: str | None = None
    duration: float | None = None
    segments: list[Segment] | None = None
    words: list[Word] | None = None


class TranscriptionText(msgspec.Struct):
    """The `json` format: the text only."""

    text: str


def decode(body: bytes) -> Transcription:
    """The provider's verbose_json; msgspec errors pass to the caller (a bad upstream)."""
    return msgspec.json.decode(body, type=Transcription)


def duration_seconds(result: Transcription) -> Decimal | None:
    if result.duration is None or result.duration < 0:
        return None
    return Decimal(repr(result.duration))


def render(result: Transcription, fmt: str, raw: bytes) -> tuple[bytes, str]:
    """The body and Content-Type of `fmt`; verbose_json is the provider's body as it came."""
    if fmt == "verbose_json":
        return raw, "application/json"
    if fmt == "json":
        return msgspec.json.encode(TranscriptionText(result.text)), "application/json"
    if fmt == "text":
        return (result.text + "\n").encode(), "text/plain; charset=utf-8"
    segments = result.segments or [Segment(0, 0.0, result.duration or 0.0, result.text)]
    if fmt == "srt":
        blocks = [
            f"{n}\n{_stamp(s.start, ',')} --> {_stamp(s.end, ',')}\n{s.text.strip()}\n"
            for n, s in enumerate(segments, 1)
        ]
        return "\n".join(blocks).encode(), "text/plain; charset=utf-8"
    assert fmt == "vtt", fmt
    cues = [
        f"{_stamp(s.start, '.')} --> {_stamp(s.end, '.')}\n{s.text.strip()}\n" for s in segments
    ]
    return ("WEBVTT\n\n" + "\n".join(cues)).encode(), "text/vtt; charset=utf-8"


def _stamp(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, ms = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def as_object(result: Transcription) -> dict[str, Any]:
    return msgspec.to_builtins(result)  # type: ignore[no-any-return]
