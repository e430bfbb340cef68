"""The audio routes' remaining cases over real HTTP, on both backends: bring-your-own-key
(the org's key sent, nothing billed, unpriced models allowed), a client leaving mid-upload
(the provider's connection closed, nothing charged), a provider breaking off mid-speech, and
transcription failures as `completion.error` events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest
import trio

from protocol.billing import charge_micros
from tests.gateway.audio.support import (
    CREDIT,
    MB,
    TTS_PRICE,
    audio_requests,
    audio_rig,
    chunk,
    connect,
    field,
    file_head,
    file_part,
    form,
    post_form,
    upload_head,
    wav,
)
from tests.inference import Rig, ledger
from tests.waiting import wait_until

OWN_KEY = "sk-org-own-audio-key"
TRANSCRIPTIONS = "/v1/audio/transcriptions"


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with audio_rig(database_url, tmp_path) as r:
        yield r


async def test_own_provider_key_is_sent_and_nothing_is_billed(
    database_url: str, tmp_path: Path
) -> None:
    async with audio_rig(database_url, tmp_path, credit_usd=None) as rig:
        gw = rig.gateway
        r = await gw.client.post(
            "/v1/provider_keys", json={"provider": "sim", "api_key": OWN_KEY}, headers=gw.auth()
        )
        assert r.status_code == 201, r.text
        for model in ("tts", "tts-unpriced"):
            r = await gw.client.post(
                "/v1/audio/speech",
                json={"model": model, "input": "hello", "voice": "alloy"},
                headers=gw.auth(rig.key),
            )
            assert r.status_code == 200, r.text
        r = await post_form(rig, TRANSCRIPTIONS, form(field("model", "whisper"), file_part(wav(2))))
        assert r.status_code == 200, r.text
        sent = [q for q in rig.upstream.requests if q.path.startswith("/v1/audio/")]
        assert [q.headers["authorization"] for q in sent] == [f"Bearer {OWN_KEY}"] * 3
        balance, rows = await ledger(rig, 3)
        assert balance == 0 and [row.amount_micros for row in rows] == [0, 0, 0]


async def test_a_client_leaving_mid_upload_closes_the_upstream_and_costs_nothing(
    rig: Rig,
) -> None:
    stream = await connect(rig)
    await stream.send_all(upload_head(rig, TRANSCRIPTIONS, length=None))
    await stream.send_all(chunk(field("model", "whisper") + file_head() + wav(1)[:44]))
    for _ in range(16):
        await stream.send_all(chunk(bytes(MB // 4)))
    # The gateway holds the reservation and has the provider's connection open.
    await wait_until(lambda: rig.upstream.statistics()["connections_open"] >= 1)
    await stream.aclose()
    await wait_until(lambda: rig.upstream.statistics()["connections_open"] == 0)
    assert audio_requests(rig, TRANSCRIPTIONS) == []  # the upstream never got a whole request
    assert await ledger(rig, 0) == (CREDIT, [])
    r = await post_form(rig, TRANSCRIPTIONS, form(field("model", "whisper"), file_part(wav(1))))
    assert r.status_code == 200


async def test_a_provider_breaking_off_mid_speech_ends_the_response_and_is_charged(
    rig: Rig,
) -> None:
    rig.upstream.behavior.break_after_chunks = 2
    stream = await connect(rig)
    body = b'{"model":"tts","input":"%s","voice":"alloy"}' % (b"x" * 400)
    await stream.send_all(
        b"POST /v1/audio/speech HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {rig.key}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    received = b""
    with trio.fail_after(10):
        while data := await stream.receive_some():
            received += data
    await stream.aclose()
    assert received.startswith(b"HTTP/1.1 200")
    assert not received.endswith(b"0\r\n\r\n")  # cut short: no last chunk
    balance, rows = await ledger(rig, 1)
    charge = charge_micros(Decimal(400) / 1000 * TTS_PRICE, Decimal(4))
    assert len(rows) == 1 and balance == CREDIT - charge


async def test_transcription_failures_are_completion_error_events(rig: Rig) -> None:
    rig.upstream.behavior.fail_status = 500
    r = await post_form(rig, TRANSCRIPTIONS, form(field("model", "whisper"), file_part(wav(1))))
    assert r.status_code == 502
    r = await post_form(
        rig, "/v1/audio/translations", form(field("model", "scribe"), file_part(b"x"))
    )
    assert r.status_code == 400
    await rig.gateway.runtime.event_writer.flush()
    events = await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id, limit=100)
    errors = sorted(
        (e.data["status"], e.data["model"]) for e in events if e.type == "completion.error"
    )
    assert errors == [(400, "sim/sim-transcribe"), (502, "sim/whisper-1")]
