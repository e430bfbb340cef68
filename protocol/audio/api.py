"""Shapes of the audio routes for /openapi.json only: the routes parse their bodies themselves
(the speech body through `speech.SpeechRequest`, the forms as streams)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

# The speech answer: raw audio in the requested format (audio/mpeg, audio/opus, audio/aac,
# audio/flac, audio/wav or audio/pcm).
AudioBytes = Annotated[
    str,
    msgspec.Meta(
        extra_json_schema={"format": "binary"},
        description="audio bytes; Content-Type audio/mpeg, audio/opus, audio/aac, audio/flac, "
        "audio/wav or audio/pcm as `response_format` asks",
    ),
]


# A transcript as text: `response_format` text or srt (text/plain), vtt (text/vtt).
TranscriptText = Annotated[str, msgspec.Meta(description="the transcript, as asked")]


class TranscriptionForm(msgspec.Struct, kw_only=True):
    """The multipart form of the transcription and translation routes, its parts in any order;
    `timestamp_granularities[]` may repeat and needs verbose_json."""

    model: str
    file: Annotated[
        str,
        msgspec.Meta(
            extra_json_schema={"format": "binary"},
            description="mp3, mp4, mpeg, mpga, m4a, wav or webm (by extension); 25 MB at most",
        ),
    ]
    language: str | None = None
    prompt: str | None = None
    response_format: Literal["json", "text", "srt", "vtt", "verbose_json"] = "json"
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0
    timestamp_granularities: list[Literal["word", "segment"]] | None = msgspec.field(
        default=None, name="timestamp_granularities[]"
    )
