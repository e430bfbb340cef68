"""The OpenAI audio endpoints, simulated: speech as a paced stream of deterministic pseudo-audio
(a valid WAV header for `wav`), transcriptions and translations of a multipart upload in every
response format.

Pure like the other routes: the server paces the speech chunks (`chunk_interval_s`, one chunk
per 16 input characters) and counts a client that leaves in `streams_client_closed`. The upload
is buffered (the server's MAX_BODY is 32 MiB); `parse_form` is public so that tests can check
what the gateway sent (fields, field order, file bytes).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any

import msgspec

from bench.upstream import forms
from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.openai_routes import error_reply
from bench.upstream.replies import JsonReply, Reply, StreamReply

BYTES_PER_CHAR = 100  # of pseudo-audio per input character
CHARS_PER_CHUNK = 16
SAMPLE_RATE = 16000  # the speech WAV: 16 kHz mono 16-bit, 32,000 bytes a second
NOT_WAV_BYTES_PER_SECOND = 16000  # the duration of another file: its size at 128 kbit/s
SEGMENT_WORDS = 4
CONTENT_TYPES = {
    "mp3": b"audio/mpeg",
    "opus": b"audio/opus",
    "aac": b"audio/aac",
    "flac": b"audio/flac",
    "wav": b"audio/wav",
    "pcm": b"audio/pcm",
}


class _SpeechRequest(msgspec.Struct):
    model: str
    input: str
    voice: str
    response_format: str = "mp3"
    speed: float = 1.0


def speech(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    try:
        body = msgspec.json.decode(request.body, type=_SpeechRequest)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return error_reply(400, f"invalid speech request: {exc}")
    fmt = body.response_format
    if fmt not in CONTENT_TYPES:
        return error_reply(400, f"unknown response_format {fmt!r}", param="response_format")
    audio = speech_bytes(body.input, fmt)
    step = CHARS_PER_CHUNK * BYTES_PER_CHAR
    frames = [(audio[i : i + step], True) for i in range(0, len(audio), step)]
    return StreamReply(frames, content_type=CONTENT_TYPES[fmt])


def speech_bytes(text: str, fmt: str) -> bytes:
    """The whole answer for `text`: BYTES_PER_CHAR per character (after a 44-byte header for
    wav), the same for the same text."""
    size = len(text) * BYTES_PER_CHAR
    seed = hashlib.sha256(f"{fmt}:{text}".encode()).digest()
    data = (seed * (size // len(seed) + 1))[:size]
    if fmt == "wav":
        return wav_header(size) + data
    return data


def wav_header(data_bytes: int) -> bytes:
    """A PCM 16-bit mono WAV header at SAMPLE_RATE for `data_bytes` of samples."""
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data_bytes)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, SAMPLE_RATE, SAMPLE_RATE * 2, 2, 16)
        + b"data"
        + struct.pack("<I", data_bytes)
    )


@dataclass
class Upload:
    """A parsed form: every field's values in order, the file part's bytes and filename, and
    the names of the parts in the order they came."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    file: bytes | None = None
    filename: str | None = None
    order: list[str] = field(default_factory=list)

    def value(self, name: str, default: str | None = None) -> str | None:
        values = self.fields.get(name)
        return values[0] if values else default


def parse_form(content_type: str, body: bytes) -> Upload | None:
    """The multipart form in `body`, or None when it is not one."""
    parts = forms.parse_form(content_type, body)
    if parts is None:
        return None
    upload = Upload()
    for part in parts:
        upload.order.append(part.name)
        if part.name == "file" and part.filename is not None:
            upload.file, upload.filename = part.data, part.filename
        else:
            upload.fields.setdefault(part.name, []).append(part.data.decode("utf-8", "replace"))
    return upload


def transcriptions(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    return _transcribe(request, behavior, "transcribe")


def translations(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    return _transcribe(request, behavior, "translate")


def _transcribe(request: RecordedRequest, behavior: UpstreamBehavior, task: str) -> Reply:
    upload = parse_form(request.headers.get("content-type", ""), request.body)
    if upload is None:
        return error_reply(400, "the body is not a multipart/form-data form")
    if upload.file is None:
        return error_reply(400, "the form has no file", param="file")
    model = upload.value("model")
    if not model:
        return error_reply(400, "the form has no model", param="model")
    fmt = upload.value("response_format", "json") or "json"
    duration = audio_duration(upload.file)
    words = _words(upload.file, duration)
    text = " ".join(w["word"] for w in words)
    if fmt == "text":
        return JsonReply(200, (text + "\n").encode(), content_type=b"text/plain; charset=utf-8")
    if fmt in ("srt", "vtt"):
        return error_reply(400, "the simulator renders srt and vtt through verbose_json only")
    if fmt == "json":
        return JsonReply(200, msgspec.json.encode({"text": text}))
    result: dict[str, Any] = {
        "task": task,
        "language": "english" if task == "translate" else (upload.value("language") or "english"),
        "duration": duration,
        "text": text,
        "segments": _segments(words),
    }
    if "word" in upload.fields.get("timestamp_granularities[]", []):
        result["words"] = words
    if not behavior.report_audio_duration:
        del result["duration"]
    return JsonReply(200, msgspec.json.encode(result))


def audio_duration(data: bytes) -> float:
    """Seconds: a WAV header's data size / byte rate, else the size at 128 kbit/s."""
    if len(data) >= 44 and data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        (byte_rate,) = struct.unpack_from("<I", data, 28)
        (size,) = struct.unpack_from("<I", data, 40)
        if byte_rate:
            return float(min(size, len(data) - 44) / byte_rate)
    return len(data) / NOT_WAV_BYTES_PER_SECOND


def _words(data: bytes, duration: float) -> list[dict[str, Any]]:
    """One word a second (at least one), named from the file's digest: deterministic."""
    digest = hashlib.sha256(data).hexdigest()
    count = max(1, min(64, int(duration)))
    step = duration / count
    return [
        {"word": f"w{digest[i % 60 : i % 60 + 4]}", "start": i * step, "end": (i + 1) * step}
        for i in range(count)
    ]


def _segments(words: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for n, i in enumerate(range(0, len(words), SEGMENT_WORDS)):
        group = words[i : i + SEGMENT_WORDS]
        out.append(
            {
                "id": n,
                "start": group[0]["start"],
                "end": group[-1]["end"],
                "text": " ".join(w["word"] for w in group),
            }
        )
    return out
