"""The form fields of `POST /v1/audio/transcriptions` and `/translations`, checked one by one
as they arrive (the form is streamed: the file is relayed before later fields are seen)."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from protocol.errors import APIError, invalid_request

MAX_FILE_BYTES = 25_000_000  # the API's 25 MB (the `[server] max_audio_body_bytes` default)
RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
GRANULARITIES = ("word", "segment")
# By filename extension (docs/decisions.md, "Audio"): the container is the provider's to read.
FILE_EXTENSIONS = frozenset({"mp3", "mp4", "mpeg", "mpga", "m4a", "wav", "webm"})
# The lowest bitrate a supported file plausibly has (8 kbit/s speech): the reservation holds
# the minutes a file of the declared size lasts at this rate.
MIN_BYTES_PER_SECOND = 1000
# Forwarded to the provider as sent (after checking); everything else is dropped.
FORWARDED = frozenset({"language", "prompt", "temperature"})
GRANULARITIES_FIELD = "timestamp_granularities[]"


@dataclass
class TranscriptionFields:
    """The fields read so far; `check` once they are all in."""

    model: str | None = None
    language: str | None = None
    prompt: str | None = None
    response_format: str = "json"
    temperature: float = 0.0
    granularities: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def add(self, name: str, value: str) -> bool:
        """Take one field; True when it is forwarded to the provider. 400 for a bad value or
        a repeated field (other than `timestamp_granularities[]`)."""
        if name in ("timestamp_granularities[]", "timestamp_granularities"):
            if value not in GRANULARITIES:
                raise invalid_request(
                    "`timestamp_granularities[]` values are `word` and `segment`.",
                    param="timestamp_granularities",
                )
            if value not in self.granularities:
                self.granularities.append(value)
            return True
        if name in self.seen:
            raise invalid_request(
                f"The form has more than one `{name}` part.", param=name, code="duplicate_part"
            )
        self.seen.add(name)
        if name == "model":
            if not value:
                raise invalid_request("`model` must not be empty.", param="model")
            self.model = value
        elif name == "language":
            self.language = value
        elif name == "prompt":
            self.prompt = value
        elif name == "response_format":
            if value not in RESPONSE_FORMATS:
                raise invalid_request(
                    f"`response_format` must be one of {', '.join(RESPONSE_FORMATS)}.",
                    param="response_format",
                )
            self.response_format = value
        elif name == "temperature":
            self.temperature = parse_temperature(value)
        return name in FORWARDED

    def check(self) -> None:
        """The rules across fields, once the whole form was read."""
        if self.granularities and self.response_format != "verbose_json":
            raise invalid_request(
                "`timestamp_granularities[]` requires `response_format` verbose_json.",
                param="timestamp_granularities",
            )


def parse_temperature(value: str) -> float:
    try:
        temperature = float(value)
    except ValueError:
        temperature = -1.0
    if not 0.0 <= temperature <= 1.0:  # also NaN
        raise invalid_request(
            "`temperature` must be a number from 0.0 to 1.0.", param="temperature"
        )
    return temperature


def check_filename(filename: str | None) -> str:
    """The file's extension, which must be a supported one (400 `invalid_file_format`)."""
    extension = (filename or "").rpartition(".")[2].lower() if "." in (filename or "") else ""
    if extension not in FILE_EXTENSIONS:
        raise invalid_request(
            f"Unsupported file format; use one of {', '.join(sorted(FILE_EXTENSIONS))} "
            "(by filename extension).",
            param="file",
            code="invalid_file_format",
        )
    return extension


def file_too_large(limit: int) -> APIError:
    """The API: 400 for audio over 25 MB. `Connection: close`: the rest is never read."""
    return APIError(
        400,
        f"The audio file is larger than {limit} bytes.",
        type="invalid_request_error",
        param="file",
        code="file_too_large",
        headers={"Connection": "close"},
    )


def reserved_minutes(file_bytes: int) -> Decimal:
    """The most minutes a file of `file_bytes` plausibly lasts (see MIN_BYTES_PER_SECOND)."""
    return Decimal(max(file_bytes, 1)) / MIN_BYTES_PER_SECOND / 60


def supports_translation(upstream_model: str, configured: bool | None = None) -> bool:
    """Whether a model serves translations: as `configured` (a `[[models]]` entry's
    `translations`) when set, else by its upstream name: whisper models translate (whisper-1
    and open-weight whisper-* served by vLLM and others); OpenAI's gpt-4o-*-transcribe and
    other providers' models do not. A self-hosted Whisper under another name
    (`Systran/faster-whisper-large-v3`) is configured with `translations = true`."""
    if configured is not None:
        return configured
    return upstream_model.lower().startswith("whisper")
