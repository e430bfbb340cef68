"""The audio routes as the request layer sees them (OpenAPI included)."""

from __future__ import annotations

from gateway.audio.speech import Speech
from gateway.audio.transcription import FORM_OVERHEAD_BYTES, Transcribe
from gateway.inference.deps import InferenceDeps
from gateway.web import Operation, Routes
from gateway.web.errors import UPSTREAM_STATUSES
from protocol.audio.api import AudioBytes, TranscriptionForm, TranscriptText
from protocol.audio.speech import CONTENT_TYPES as SPEECH_CONTENT_TYPES
from protocol.audio.speech import SpeechRequest
from protocol.audio.transcript import Transcription
from protocol.scopes import AUDIO

__all__ = ["COMPLETION_ROUTES", "FORM_OVERHEAD_BYTES", "routes"]

_TAG = "Audio"
SPEECH_PATH = "/v1/audio/speech"
TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
TRANSLATIONS_PATH = "/v1/audio/translations"
# Their failures are `completion.error` events, as chat's are (gateway/audio/area.py).
COMPLETION_ROUTES = frozenset({SPEECH_PATH, TRANSCRIPTIONS_PATH, TRANSLATIONS_PATH})
_ERRORS = (*UPSTREAM_STATUSES, 402, 403)
# The speech answer's type per `response_format`; the first is the default (mp3).
_AUDIO_TYPES = tuple(dict.fromkeys(SPEECH_CONTENT_TYPES.values()))


def routes(deps: InferenceDeps, max_file_bytes: int) -> Routes:
    r = Routes()
    r.add(
        Operation(
            "POST",
            SPEECH_PATH,
            "Text to speech: audio bytes as the provider makes them (`Content-Type` per format)",
            _TAG,
            request=SpeechRequest,
            response=AudioBytes,
            response_content_type=_AUDIO_TYPES[0],
            alternatives=tuple((kind, AudioBytes) for kind in _AUDIO_TYPES[1:]),
            scope=AUDIO,
            errors=_ERRORS,
        ),
        Speech(deps),
    )
    for path, task, summary in (
        (TRANSCRIPTIONS_PATH, "transcription", "Speech to text in the source language"),
        (TRANSLATIONS_PATH, "translation", "Speech to English text (whisper models)"),
    ):
        r.add(
            Operation(
                "POST",
                path,
                f"{summary} (multipart, streamed to the provider; json, text, srt, vtt or "
                "verbose_json)",
                _TAG,
                request=TranscriptionForm,
                request_content_type="multipart/form-data",
                response=Transcription,
                # response_format text and srt (text/plain), vtt (text/vtt)
                alternatives=(("text/plain", TranscriptText), ("text/vtt", TranscriptText)),
                scope=AUDIO,
                body_limit="audio",
                errors=(*_ERRORS, 415),
            ),
            Transcribe(deps, task, max_file_bytes),
        )
    return r
