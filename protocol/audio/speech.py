"""`POST /v1/audio/speech`: the request, checked as docs/audio.md says, and the
`Content-Type` of each `response_format`."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

import msgspec

from protocol.decoding import decode_json
from protocol.errors import invalid_request

MAX_INPUT_CHARS = 4096
MIN_SPEED, MAX_SPEED = 0.25, 4.0
# The voices of OpenAI's own TTS models; other models take their provider's voices as sent.
OPENAI_TTS_MODELS = frozenset({"tts-1", "tts-1-hd"})
OPENAI_VOICES = ("alloy", "echo", "fable", "onyx", "nova", "shimmer")
# What each format is served as (docs/decisions.md, "Audio"): the IANA types, `audio/pcm` for
# raw 16-bit little-endian samples (no registered type fits better).
CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
SpeechFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]


class SpeechRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A text-to-speech request. `input` is billed per 1,000 characters (Unicode code points)."""

    model: str
    input: str
    voice: str
    response_format: SpeechFormat = "mp3"
    speed: float = 1.0
    stream: bool = False

    @property
    def content_type(self) -> str:
        return CONTENT_TYPES[self.response_format]

    @property
    def thousand_chars(self) -> Decimal:
        """The billed units: characters / 1000, exact."""
        return Decimal(len(self.input)) / 1000


def parse_speech(body: bytes) -> SpeechRequest:
    """The request, or APIError 400 naming the field (empty or long `input`, `speed` out of
    range, unknown `response_format`). The voice is checked once the model is resolved
    (`check_voice`): it depends on the upstream model."""
    request = decode_json(body, SpeechRequest)
    if not request.input:
        raise invalid_request("`input` must not be empty.", param="input")
    if len(request.input) > MAX_INPUT_CHARS:
        raise invalid_request(
            f"`input` is longer than {MAX_INPUT_CHARS} characters ({len(request.input)}).",
            param="input",
            code="input_too_long",
        )
    if not MIN_SPEED <= request.speed <= MAX_SPEED:
        raise invalid_request(
            f"`speed` must be between {MIN_SPEED} and {MAX_SPEED}.", param="speed"
        )
    if not request.voice:
        raise invalid_request("`voice` must not be empty.", param="voice")
    return request


def check_voice(upstream_model: str, voice: str) -> None:
    """tts-1 and tts-1-hd take OpenAI's six voices only; other models' voices pass through."""
    if upstream_model in OPENAI_TTS_MODELS and voice not in OPENAI_VOICES:
        raise invalid_request(
            f"Unknown voice {voice!r} for {upstream_model}; use one of {', '.join(OPENAI_VOICES)}.",
            param="voice",
            code="invalid_voice",
        )


def upstream_body(request: SpeechRequest, upstream_model: str) -> bytes:
    """The body sent to the provider: the checked fields, `model` rewritten. `stream` is ours
    (OpenAI's API streams every speech answer as it is made), so it is not sent."""
    out: dict[str, object] = {
        "model": upstream_model,
        "input": request.input,
        "voice": request.voice,
        "response_format": request.response_format,
        "speed": request.speed,
    }
    return msgspec.json.encode(out)
