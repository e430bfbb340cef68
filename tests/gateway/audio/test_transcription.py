"""POST /v1/audio/transcriptions and /translations over real HTTP against the simulated
upstream, on both backends: the SDK in every response format, what the provider received
(model rewritten, fields, identical file bytes), hostile forms, and exact per-minute charges."""

from __future__ import annotations

import hashlib
import io
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.billing import charge_micros
from tests.gateway.audio.support import (
    CREDIT,
    STT_PRICE,
    WHISPER_PRICE,
    assert_error,
    audio_requests,
    audio_rig,
    field,
    file_part,
    form,
    post_form,
    sdk,
    upstream_form,
    wav,
)
from tests.gateway.keys_client import create_key
from tests.inference import Rig, ledger

TRANSCRIPTIONS = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"
FEE = Decimal("4")


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with audio_rig(database_url, tmp_path) as r:
        yield r


def expected(seconds: Decimal, price: Decimal = WHISPER_PRICE) -> int:
    return charge_micros(seconds / 60 * price, FEE)


def named(data: bytes, name: str = "speech.wav") -> io.BytesIO:
    f = io.BytesIO(data)
    f.name = name
    return f


async def transcribe(rig: Rig, **kwargs: Any) -> Any:
    def call() -> Any:
        with sdk(rig) as client:
            return client.audio.transcriptions.create(**kwargs)

    return await trio.to_thread.run_sync(call)


async def test_the_sdk_gets_json_by_default_and_the_provider_got_the_file_intact(
    rig: Rig,
) -> None:
    audio = wav(7.25)
    result = await transcribe(rig, model="whisper", file=named(audio), language="en")
    assert result.text.startswith("w")
    (sent,) = audio_requests(rig, TRANSCRIPTIONS)
    upload = upstream_form(sent)
    assert upload.value("model") == "whisper-1"
    assert upload.value("response_format") == "verbose_json"
    assert upload.value("language") == "en"
    assert upload.order[0] == "model" and "file" in upload.order
    assert upload.filename == "audio.wav"
    assert upload.file is not None
    assert hashlib.sha256(upload.file).digest() == hashlib.sha256(audio).digest()
    assert sent.headers["authorization"] == "Bearer sim-provider-secret-key"
    balance, rows = await ledger(rig, 1)
    assert balance == CREDIT - expected(Decimal("7.25"))
    assert rows[0].model == "sim/whisper-1" and rows[0].request_id.startswith("req_")


async def test_each_response_format(rig: Rig) -> None:
    audio = wav(9)
    verbose = await transcribe(
        rig, model="whisper", file=named(audio), response_format="verbose_json"
    )
    assert verbose.duration == 9 and verbose.task == "transcribe"
    assert verbose.language == "english"
    segments = verbose.segments
    assert [s.id for s in segments] == [0, 1, 2] and segments[0].start == 0
    assert getattr(verbose, "words", None) is None
    words = await transcribe(
        rig,
        model="whisper",
        file=named(audio),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    assert len(words.words) == 9 and words.words[1].start == 1.0
    sent = upstream_form(audio_requests(rig, TRANSCRIPTIONS)[-1])
    assert sent.fields["timestamp_granularities[]"] == ["word", "segment"]
    text = await transcribe(rig, model="whisper", file=named(audio), response_format="text")
    assert text.strip() == verbose.text
    srt = await transcribe(rig, model="whisper", file=named(audio), response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:04,000\n")
    assert "3\n00:00:08,000 --> 00:00:09,000\n" in srt
    vtt = await transcribe(rig, model="whisper", file=named(audio), response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:04.000\n")
    plain = await transcribe(rig, model="whisper", file=named(audio), response_format="json")
    assert plain.text == verbose.text
    balance, rows = await ledger(rig, 6)
    assert balance == CREDIT - 6 * expected(Decimal(9))
    assert len(rows) == 6


async def test_content_types_of_the_text_formats(rig: Rig) -> None:
    for fmt, content_type in (
        ("json", "application/json"),
        ("verbose_json", "application/json"),
        ("text", "text/plain; charset=utf-8"),
        ("srt", "text/plain; charset=utf-8"),
        ("vtt", "text/vtt; charset=utf-8"),
    ):
        body = form(field("model", "whisper"), field("response_format", fmt), file_part(wav(1)))
        r = await post_form(rig, TRANSCRIPTIONS, body)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == content_type


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK marks translations so
async def test_translations_with_the_sdk_and_unsupported_models(rig: Rig) -> None:
    def call() -> Any:
        with sdk(rig) as client:
            return client.audio.translations.create(
                model="whisper", file=named(wav(2), "talk.mp3"), response_format="verbose_json"
            )

    result = await trio.to_thread.run_sync(call)
    assert result.task == "translate" and result.language == "english"
    (sent,) = audio_requests(rig, TRANSLATIONS)
    assert upstream_form(sent).filename == "audio.mp3"
    body = form(field("model", "scribe"), file_part(wav(1)))
    assert_error(await post_form(rig, TRANSLATIONS, body), 400, "unsupported_model", "model")
    r = await post_form(rig, TRANSCRIPTIONS, body)  # it does transcribe
    assert r.status_code == 200
    balance, _ = await ledger(rig, 2)
    assert balance == CREDIT - expected(Decimal(2)) - expected(Decimal(1), STT_PRICE)


async def test_translations_follow_the_models_setting(database_url: str, tmp_path: Path) -> None:
    # A self-hosted Whisper whose upstream name does not start with `whisper`, and a whisper
    # model an operator does not let translate.
    extra = f"""
[[models]]
id = "faster-whisper"
provider = "sim"
upstream = "Systran/faster-whisper-large-v3"
usd_per_minute = {WHISPER_PRICE}
translations = true

[[models]]
id = "whisper-no-translate"
provider = "sim"
upstream = "whisper-1"
usd_per_minute = {WHISPER_PRICE}
translations = false
"""
    async with audio_rig(database_url, tmp_path, extra_toml=extra) as rig:
        body = form(field("model", "faster-whisper"), file_part(wav(2)))
        r = await post_form(rig, TRANSLATIONS, body)
        assert r.status_code == 200, r.text
        (sent,) = audio_requests(rig, TRANSLATIONS)
        assert upstream_form(sent).value("model") == "Systran/faster-whisper-large-v3"
        body = form(field("model", "whisper-no-translate"), file_part(wav(1)))
        assert_error(await post_form(rig, TRANSLATIONS, body), 400, "unsupported_model", "model")
        assert (await post_form(rig, TRANSCRIPTIONS, body)).status_code == 200  # it transcribes
        assert len(audio_requests(rig, TRANSLATIONS)) == 1
        balance, _ = await ledger(rig, 2)
        assert balance == CREDIT - expected(Decimal(2)) - expected(Decimal(1))


async def test_fields_after_the_file_are_checked_and_forwarded(rig: Rig) -> None:
    body = form(
        field("model", "whisper"),
        file_part(wav(1)),
        field("response_format", "verbose_json"),
        field("timestamp_granularities[]", "word"),
        field("prompt", "Gateways, ledgers."),
        field("temperature", "0.5"),
    )
    r = await post_form(rig, TRANSCRIPTIONS, body)
    assert r.status_code == 200, r.text
    assert "words" in r.json()
    upload = upstream_form(audio_requests(rig, TRANSCRIPTIONS)[-1])
    assert upload.value("prompt") == "Gateways, ledgers."
    assert upload.value("temperature") == "0.5"
    assert upload.fields["timestamp_granularities[]"] == ["word"]
    bad = form(field("model", "whisper"), file_part(wav(1)), field("temperature", "2"))
    assert_error(await post_form(rig, TRANSCRIPTIONS, bad), 400, None, "temperature")
    balance, rows = await ledger(rig, 1)
    assert len(rows) == 1 and balance == CREDIT - expected(Decimal(1))


@pytest.mark.parametrize(
    ("parts", "code", "param"),
    [
        ((file_part(wav(1)), field("language", "en")), "missing_required_field", "model"),
        ((file_part(wav(1), "a.ogg"), field("model", "whisper")), "invalid_file_format", "file"),
        (
            (file_part(b"x"), field("model", "whisper"), field("temperature", "2")),
            None,
            "temperature",
        ),
        (
            (file_part(b"x"), field("model", "whisper"), field("model", "whisper")),
            "duplicate_part",
            "model",
        ),
        ((file_part(b"x"), field("model", "whisper"), file_part(b"y")), "duplicate_part", "file"),
        ((file_part(b"x"), field("model", "no-such-model")), "model_not_found", "model"),
        ((field("model", "whisper"),), "missing_required_field", "file"),
        ((field("language", "en"),), "missing_required_field", "model"),
        ((field("model", "whisper"), file_part(wav(1), "a.ogg")), "invalid_file_format", "file"),
        ((field("model", "whisper"), file_part(wav(1), "noext")), "invalid_file_format", "file"),
        (
            (field("model", "whisper"), field("temperature", "1.01"), file_part(b"x")),
            None,
            "temperature",
        ),
        (
            (field("model", "whisper"), field("temperature", "-0.1"), file_part(b"x")),
            None,
            "temperature",
        ),
        (
            (field("model", "whisper"), field("temperature", "nan"), file_part(b"x")),
            None,
            "temperature",
        ),
        (
            (field("model", "whisper"), field("response_format", "xml"), file_part(b"x")),
            None,
            "response_format",
        ),
        (
            (
                field("model", "whisper"),
                field("timestamp_granularities[]", "word"),
                file_part(b"x"),
            ),
            None,
            "timestamp_granularities",
        ),
        (
            (
                field("model", "whisper"),
                field("response_format", "json"),
                field("timestamp_granularities[]", "word"),
                file_part(b"x"),
            ),
            None,
            "timestamp_granularities",
        ),
        (
            (
                field("model", "whisper"),
                field("timestamp_granularities[]", "char"),
                file_part(b"x"),
            ),
            None,
            "timestamp_granularities",
        ),
        (
            (field("model", "whisper"), field("model", "whisper"), file_part(b"x")),
            "duplicate_part",
            "model",
        ),
        ((field("model", "whisper"), file_part(b"x"), file_part(b"y")), "duplicate_part", "file"),
        ((field("model", ""), file_part(b"x")), None, "model"),
    ],
)
async def test_bad_forms_are_refused_and_cost_nothing(
    rig: Rig, parts: tuple[bytes, ...], code: str | None, param: str
) -> None:
    r = await post_form(rig, TRANSCRIPTIONS, form(*parts))
    assert_error(r, 404 if code == "model_not_found" else 400, code, param)
    assert await ledger(rig, 0) == (CREDIT, [])
    assert audio_requests(rig, TRANSCRIPTIONS) == []


# The file is held in memory up to 1 MiB, in an encrypted temporary file past it.
@pytest.mark.parametrize("seconds", [2, 40])
@pytest.mark.parametrize(
    "order",
    [
        ("file", "model"),  # OpenAI's documented curl: -F file=@audio.mp3 -F model=whisper-1
        ("language", "file", "response_format", "model", "prompt"),
        ("file", "timestamp_granularities[]", "response_format", "model"),
    ],
)
async def test_the_file_may_come_before_the_model(
    rig: Rig, seconds: int, order: tuple[str, ...]
) -> None:
    audio = wav(seconds)
    values = {
        "model": "whisper",
        "language": "en",
        "response_format": "verbose_json",
        "prompt": "Ledgers.",
        "timestamp_granularities[]": "word",
    }
    parts = [file_part(audio) if name == "file" else field(name, values[name]) for name in order]
    r = await post_form(rig, TRANSCRIPTIONS, form(*parts))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["text"].startswith("w")
    if "response_format" in order:
        assert answer["duration"] == seconds
    if "timestamp_granularities[]" in order:
        assert len(answer["words"]) == seconds
    (sent,) = audio_requests(rig, TRANSCRIPTIONS)
    upload = upstream_form(sent)
    assert upload.value("model") == "whisper-1"
    assert upload.value("response_format") == "verbose_json"
    for name in ("language", "prompt"):
        assert upload.value(name) == (values[name] if name in order else None)
    assert upload.order[0] == "model" and upload.order[-1] == "file"  # every field before it
    assert upload.filename == "audio.wav"
    assert upload.file is not None
    assert hashlib.sha256(upload.file).digest() == hashlib.sha256(audio).digest()
    balance, rows = await ledger(rig, 1)
    assert balance == CREDIT - expected(Decimal(seconds))
    assert rows[0].model == "sim/whisper-1"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_translations_take_the_file_first_too(rig: Rig) -> None:
    body = form(file_part(wav(3), "talk.mp3"), field("model", "whisper"))
    r = await post_form(rig, TRANSLATIONS, body)
    assert r.status_code == 200, r.text
    (sent,) = audio_requests(rig, TRANSLATIONS)
    assert upstream_form(sent).value("model") == "whisper-1"
    body = form(file_part(wav(1)), field("model", "scribe"))
    assert_error(await post_form(rig, TRANSLATIONS, body), 400, "unsupported_model", "model")
    balance, _ = await ledger(rig, 1)
    assert balance == CREDIT - expected(Decimal(3))


@pytest.mark.parametrize(
    ("body", "content_type", "status", "code"),
    [
        (
            b"--test-boundary-7f3a\r\ngarbage",
            "multipart/form-data; boundary=test-boundary-7f3a",
            400,
            "invalid_multipart",
        ),
        (b"", "multipart/form-data; boundary=test-boundary-7f3a", 400, "invalid_multipart"),
        (b"{}", "application/json", 415, "unsupported_media_type"),
        (b"x", "multipart/form-data", 400, "invalid_multipart"),
    ],
)
async def test_malformed_bodies(
    rig: Rig, body: bytes, content_type: str, status: int, code: str
) -> None:
    headers = {**rig.gateway.auth(rig.key), "content-type": content_type}
    r = await rig.gateway.client.post(TRANSCRIPTIONS, content=body, headers=headers)
    assert_error(r, status, code)
    assert audio_requests(rig, TRANSCRIPTIONS) == []


async def test_a_duration_the_provider_omits_comes_from_the_wav_header_or_the_size(
    rig: Rig,
) -> None:
    rig.upstream.behavior.report_audio_duration = False
    body = form(field("model", "whisper"), file_part(wav(12.5)))
    assert (await post_form(rig, TRANSCRIPTIONS, body)).status_code == 200
    mp3 = b"\xff\xfb\x90\x00" + bytes(29_996)  # 30,000 bytes: 30 s at 8 kbit/s
    body = form(field("model", "whisper"), file_part(mp3, "a.mp3"))
    assert (await post_form(rig, TRANSCRIPTIONS, body)).status_code == 200
    balance, _ = await ledger(rig, 2)
    assert balance == CREDIT - expected(Decimal("12.5")) - expected(Decimal(30))


@pytest.mark.parametrize(("status", "ours"), [(429, 429), (500, 502), (400, 400)])
async def test_upstream_failures_are_mapped_and_not_charged(
    rig: Rig, status: int, ours: int
) -> None:
    rig.upstream.behavior.fail_status = status
    r = await post_form(rig, TRANSCRIPTIONS, form(field("model", "whisper"), file_part(wav(1))))
    assert r.status_code == ours, r.text
    assert await ledger(rig, 0) == (CREDIT, [])


async def test_an_upstream_that_does_not_answer_is_504(database_url: str, tmp_path: Path) -> None:
    async with audio_rig(database_url, tmp_path, read_timeout_s=0.3) as rig:
        rig.upstream.behavior.hang = True
        body = form(field("model", "whisper"), file_part(wav(1)))
        assert_error(await post_form(rig, TRANSCRIPTIONS, body), 504, "upstream_timeout")
        assert await ledger(rig, 0) == (CREDIT, [])


async def test_access_rules(rig: Rig) -> None:
    body = form(field("model", "whisper"), file_part(wav(1)))
    no_audio = (await create_key(rig.gateway, name="c", scopes=["chat:completions"]))["key"]
    assert_error(
        await post_form(rig, TRANSCRIPTIONS, body, no_audio), 403, "insufficient_permissions"
    )
    assert_error(
        await post_form(rig, TRANSLATIONS, body, no_audio), 403, "insufficient_permissions"
    )
    tts_only = (await create_key(rig.gateway, name="t", allowed_models=["tts"]))["key"]
    assert_error(await post_form(rig, TRANSCRIPTIONS, body, tts_only), 403, "model_not_allowed")
    limited = (await create_key(rig.gateway, name="l", rate_limit_rpm=1))["key"]
    assert (await post_form(rig, TRANSCRIPTIONS, body, limited)).status_code == 200
    assert_error(await post_form(rig, TRANSCRIPTIONS, body, limited), 429, "rate_limit_exceeded")
    tts = form(field("model", "tts-unpriced"), file_part(wav(1)))
    assert_error(await post_form(rig, TRANSCRIPTIONS, tts), 400, "model_price_unknown")


async def test_without_credit_it_is_402_and_never_reaches_the_upstream(
    database_url: str, tmp_path: Path
) -> None:
    async with audio_rig(database_url, tmp_path, credit_usd=None) as rig:
        body = form(field("model", "whisper"), file_part(wav(1)))
        assert_error(await post_form(rig, TRANSCRIPTIONS, body), 402, "insufficient_credits")
        assert rig.upstream.requests == []
