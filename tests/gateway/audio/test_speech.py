"""POST /v1/audio/speech over real HTTP against the simulated upstream, on both backends: the
official SDK (create, with_streaming_response), every format's Content-Type, the limits and
voices, bytes relayed as the provider makes them, a client leaving, exact charges."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from bench.upstream.audio_routes import speech_bytes
from protocol.billing import charge_micros
from tests.gateway.audio.support import (
    CREDIT,
    TTS_OTHER_PRICE,
    TTS_PRICE,
    assert_error,
    audio_rig,
    connect,
    sdk,
)
from tests.gateway.keys_client import create_key
from tests.inference import Rig, ledger

SPEECH = "/v1/audio/speech"
FEE = Decimal("4")  # the free plan's platform fee, percent
FORMATS = {
    "mp3": "audio/mpeg",
    "opus": "audio/opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with audio_rig(database_url, tmp_path) as r:
        yield r


async def speak(rig: Rig, body: dict[str, Any], key: str | None = None) -> Any:
    return await rig.gateway.client.post(
        SPEECH, json=body, headers=rig.gateway.auth(key or rig.key)
    )


def expected(chars: int, price: Decimal = TTS_PRICE) -> int:
    return charge_micros(Decimal(chars) / 1000 * price, FEE)


@pytest.mark.parametrize("fmt", [*FORMATS, None])
async def test_the_sdk_gets_each_format_with_its_content_type(rig: Rig, fmt: str | None) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    extra: dict[str, Any] = {} if fmt is None else {"response_format": fmt}

    def call() -> Any:
        with sdk(rig) as client:
            return client.audio.speech.create(model="tts", voice="nova", input=text, **extra)

    response = await trio.to_thread.run_sync(call)
    fmt = fmt or "mp3"
    assert response.response.headers["content-type"] == FORMATS[fmt]
    assert response.content == speech_bytes(text, fmt)
    (sent,) = [r for r in rig.upstream.requests if r.path == "/v1/audio/speech"]
    body = sent.json()
    assert body["model"] == "tts-1" and body["response_format"] == fmt and body["voice"] == "nova"
    assert sent.headers["authorization"] == "Bearer sim-provider-secret-key"


async def test_the_sdk_streams_with_streaming_response(rig: Rig) -> None:
    text = "x" * 400
    rig.upstream.behavior.chunk_interval_s = 0.01

    def call() -> tuple[bytes, int]:
        with (
            sdk(rig) as client,
            client.audio.speech.with_streaming_response.create(
                model="tts", voice="echo", input=text, response_format="opus"
            ) as response,
        ):
            pieces = list(response.iter_bytes())
            assert response.headers["content-type"] == "audio/opus"
        return b"".join(pieces), len(pieces)

    data, _ = await trio.to_thread.run_sync(call)
    assert data == speech_bytes(text, "opus")
    balance, rows = await ledger(rig, 1)
    assert balance == CREDIT - expected(400)
    assert rows[0].amount_micros == -expected(400)


async def test_each_request_is_charged_characters_times_price_plus_fee(rig: Rig) -> None:
    texts = ["a", "héllo wörld ✓", "y" * 4096, "z" * 1234]
    total = 0
    request_ids = []
    for text in texts:
        r = await speak(rig, {"model": "tts", "input": text, "voice": "alloy", "stream": True})
        assert r.status_code == 200, r.text
        request_ids.append(r.headers["x-request-id"])
        total += expected(len(text))
    r = await speak(rig, {"model": "voicebox", "input": "q" * 777, "voice": "my-own-voice"})
    assert r.status_code == 200
    request_ids.append(r.headers["x-request-id"])
    total += expected(777, TTS_OTHER_PRICE)
    balance, rows = await ledger(rig, len(texts) + 1)
    assert balance == CREDIT - total
    by_request = {row.request_id: row for row in rows}
    assert set(by_request) == set(request_ids)
    for text, request_id in zip(texts, request_ids, strict=False):
        row = by_request[request_id]
        assert row.amount_micros == -expected(len(text))
        assert row.model == "sim/tts-1"
    assert by_request[request_ids[-1]].model == "sim/sim-tts"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": "x" * 4097}, "input"),
        ({"speed": 0.24}, "speed"),
        ({"speed": 4.01}, "speed"),
        ({"response_format": "ogg"}, "response_format"),
        ({"voice": "bogus"}, "voice"),
        ({"voice": ""}, "voice"),
        ({"input": 5}, "input"),
        ({"model": None}, "model"),
    ],
)
async def test_invalid_requests_are_400_and_cost_nothing(
    rig: Rig, body: dict[str, Any], param: str
) -> None:
    full = {"model": "tts", "input": "hello", "voice": "alloy", **body}
    full = {k: v for k, v in full.items() if v is not None}
    r = await speak(rig, full)
    assert_error(r, 400, r.json()["error"]["code"], param)
    assert [q for q in rig.upstream.requests if q.path == SPEECH] == []
    assert await ledger(rig, 0) == (CREDIT, [])


async def test_limits_are_inclusive_and_other_models_take_their_own_voices(rig: Rig) -> None:
    for body in (
        {"input": "x" * 4096, "speed": 0.25},
        {"input": "y", "speed": 4.0},
        {"model": "voicebox", "voice": "provider-voice-42"},
    ):
        r = await speak(rig, {"model": "tts", "input": "ok", "voice": "shimmer", **body})
        assert r.status_code == 200, r.text
    assert rig.upstream.requests[-1].json()["voice"] == "provider-voice-42"


async def test_malformed_json_is_400(rig: Rig) -> None:
    r = await rig.gateway.client.post(
        SPEECH, content=b"{not json", headers=rig.gateway.auth(rig.key)
    )
    assert_error(r, 400, "invalid_json")


async def test_first_bytes_arrive_while_the_upstream_still_streams(rig: Rig) -> None:
    rig.upstream.behavior.chunk_interval_s = 0.2  # 25 chunks: about 5 s in all
    text = "w" * 400
    async with rig.gateway.client.stream(
        "POST",
        SPEECH,
        json={"model": "tts", "input": text, "voice": "fable", "stream": True},
        headers=rig.gateway.auth(rig.key),
    ) as r:
        assert r.status_code == 200
        pieces = r.aiter_raw()
        first = await pieces.__anext__()
        assert first and rig.upstream.statistics()["streams_active"] == 1
        rest = b"".join([p async for p in pieces])
    assert first + rest == speech_bytes(text, "mp3")


async def test_a_client_leaving_closes_the_upstream_within_a_second_and_is_charged(
    rig: Rig,
) -> None:
    rig.upstream.behavior.chunk_interval_s = 0.2
    text = "v" * 800  # 50 chunks: 10 s
    payload = msgspec.json.encode({"model": "tts", "input": text, "voice": "onyx", "stream": True})
    stream = await connect(rig)
    await stream.send_all(
        b"POST /v1/audio/speech HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {rig.key}\r\ncontent-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    received = b""
    with trio.fail_after(10):
        while len(received) < 4000:
            received += await stream.receive_some()
    assert received.startswith(b"HTTP/1.1 200") and b"content-type: audio/mpeg" in received
    assert rig.upstream.statistics()["streams_active"] == 1
    await stream.aclose()
    with trio.fail_after(1):
        await rig.upstream.wait_streams_idle()
    assert rig.upstream.statistics()["streams_client_closed"] == 1
    balance, rows = await ledger(rig, 1)  # the provider did the work: charged in full
    assert balance == CREDIT - expected(800) and len(rows) == 1


@pytest.mark.parametrize(
    ("status", "ours", "code"), [(429, 429, None), (500, 502, None), (503, 502, None)]
)
async def test_upstream_failures_are_mapped_and_not_charged(
    rig: Rig, status: int, ours: int, code: str | None
) -> None:
    rig.upstream.behavior.fail_status = status
    r = await speak(rig, {"model": "tts", "input": "hi", "voice": "alloy"})
    assert r.status_code == ours, r.text
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert await ledger(rig, 0) == (CREDIT, [])
    assert rig.gateway.runtime.accountant.statistics()["settled"] == 0


async def test_an_upstream_that_does_not_answer_is_504(database_url: str, tmp_path: Path) -> None:
    async with audio_rig(database_url, tmp_path, read_timeout_s=0.3) as rig:
        rig.upstream.behavior.hang = True
        r = await speak(rig, {"model": "tts", "input": "hi", "voice": "alloy"})
        assert_error(r, 504, "upstream_timeout")
        rig.upstream.behavior.hang = False
        rig.upstream.behavior.latency_s = 0.05  # under the timeout: fine
        r = await speak(rig, {"model": "tts", "input": "hi", "voice": "alloy"})
        assert r.status_code == 200


async def test_without_credit_it_is_402_and_never_reaches_the_upstream(
    database_url: str, tmp_path: Path
) -> None:
    async with audio_rig(database_url, tmp_path, credit_usd=None) as rig:
        r = await speak(rig, {"model": "tts", "input": "hi", "voice": "alloy"})
        assert_error(r, 402, "insufficient_credits")
        assert rig.upstream.requests == []


async def test_scope_allowed_models_rate_limit_and_price(rig: Rig) -> None:
    body = {"model": "tts", "input": "hi", "voice": "alloy"}
    chat_only = (await create_key(rig.gateway, name="chat", scopes=["chat:completions"]))["key"]
    assert_error(await speak(rig, body, chat_only), 403, "insufficient_permissions")
    audio_only = (await create_key(rig.gateway, name="audio", scopes=["audio"]))["key"]
    assert (await speak(rig, body, audio_only)).status_code == 200
    other = (await create_key(rig.gateway, name="w", allowed_models=["whisper"]))["key"]
    assert_error(await speak(rig, body, other), 403, "model_not_allowed")
    limited = (await create_key(rig.gateway, name="slow", rate_limit_rpm=1))["key"]
    assert (await speak(rig, body, limited)).status_code == 200
    r = await speak(rig, body, limited)
    assert_error(r, 429, "rate_limit_exceeded")
    assert "retry-after" in r.headers
    unpriced = await speak(rig, {**body, "model": "tts-unpriced"})
    assert_error(unpriced, 400, "model_price_unknown")
    chat_model = await speak(rig, {**body, "model": "haiku"})
    assert chat_model.status_code == 400
    assert_error(await speak(rig, {**body, "model": "nope"}), 404, "model_not_found")


async def test_models_lists_the_audio_models_and_openapi_documents_the_routes(rig: Rig) -> None:
    r = await rig.gateway.client.get("/v1/models", headers=rig.gateway.auth(rig.key))
    ids = {m["id"] for m in r.json()["data"]}
    assert {"tts", "voicebox", "whisper", "scribe"} <= ids
    spec = (await rig.gateway.client.get("/openapi.json")).json()
    speech = spec["paths"]["/v1/audio/speech"]["post"]
    assert "audio/mpeg" in speech["responses"]["200"]["content"]
    for path in ("/v1/audio/transcriptions", "/v1/audio/translations"):
        post = spec["paths"][path]["post"]
        assert "multipart/form-data" in post["requestBody"]["content"]
        assert "application/json" in post["responses"]["200"]["content"]


async def test_failures_are_completion_error_events(rig: Rig) -> None:
    rig.upstream.behavior.fail_status = 500
    r = await speak(rig, {"model": "tts", "input": "hi", "voice": "alloy"})
    assert r.status_code == 502
    await rig.gateway.runtime.event_writer.flush()
    events = await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id, limit=100)
    (event,) = [e for e in events if e.type == "completion.error"]
    assert event.data["model"] == "sim/tts-1" and event.data["status"] == 502
