"""The stored conversation, sealed: round trip, encryption at rest, master-key rotation, and
30-day retention driven by Trio time (a MockClock): lookups fail at once, the janitor deletes."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing

from actors.responses_janitor import ResponsesJanitor
from actors.webhooks.clock import WallClock
from gateway.keyring import unlock
from gateway.keyring.rotate import rotate_master_key
from protocol.errors import APIError
from protocol.responses.objects import (
    OutputMessage,
    OutputText,
    ResponseObject,
    decode_response,
)
from protocol.secretbox import FILE_KEYS, SecretBox
from services.responses import ResponseStore
from storage import Storage

DAY_S = 86_400
OLD, NEW = os.urandom(32), os.urandom(32)
SECRET = "the launch code is 0000"


def response(response_id: str = "resp_1") -> ResponseObject:
    message = OutputMessage(id="msg_out", status="completed", content=[OutputText(text=SECRET)])
    return ResponseObject(id=response_id, created_at=1, model="small", output=[message])


def store(storage: Storage, key: bytes, clock: WallClock) -> ResponseStore:
    return ResponseStore(storage.responses, SecretBox.for_purpose(key, FILE_KEYS), clock.now_us)


INPUT = [
    {
        "id": "msg_in",
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": SECRET}],
    }
]


async def test_round_trip_encrypted_at_rest_and_per_organization(storage: Storage) -> None:
    clock = WallClock()
    s = store(storage, OLD, clock)
    acme = (await storage.orgs.create("acme")).id
    other = (await storage.orgs.create("other")).id
    await s.save(acme, response(), INPUT, created_us=clock.now_us())
    stored = await s.load(acme, "resp_1")
    assert stored is not None
    assert decode_response(stored.body) == response() and stored.input == INPUT
    assert [i["id"] for i in stored.context()] == ["msg_in", "msg_out"]
    assert await s.load(other, "resp_1") is None
    rows = await storage.db.fetch("SELECT * FROM responses", {})
    assert len(rows) == 1 and SECRET not in str(rows[0]) and "msg_in" not in str(rows[0])
    # A row copied under another id does not open (the id is the associated data).
    await storage.db.execute(
        "INSERT INTO responses (id, org_id, model, data_key_sealed, content_encrypted,"
        " created_at, expires_at) SELECT 'resp_copy', org_id, model, data_key_sealed,"
        " content_encrypted, created_at, expires_at FROM responses",
        {},
    )
    with pytest.raises(APIError) as caught:
        await s.load(acme, "resp_copy")
    assert caught.value.status == 500


async def test_a_master_key_rotation_reseals_stored_responses(storage: Storage) -> None:
    clock = WallClock()
    await unlock(storage.keyring, OLD)
    acme = (await storage.orgs.create("acme")).id
    await store(storage, OLD, clock).save(acme, response(), INPUT, created_us=clock.now_us())
    report = await rotate_master_key(storage.keyring, OLD, NEW)
    assert report.resealed["responses"] == 1 and not report.unreadable
    stored = await store(storage, NEW, clock).load(acme, "resp_1")
    assert stored is not None and decode_response(stored.body).output_text == SECRET
    with pytest.raises(APIError):
        await store(storage, OLD, clock).load(acme, "resp_1")


async def test_retention_is_30_days_of_trio_time_then_the_janitor_deletes(
    storage: Storage, mock_clock: trio.testing.MockClock
) -> None:
    clock = WallClock()
    s = store(storage, OLD, clock)
    janitor = ResponsesJanitor(storage.responses, clock.now_us, interval_s=3600)
    acme = (await storage.orgs.create("acme")).id
    await s.save(acme, response(), INPUT, created_us=clock.now_us())
    mock_clock.jump(30 * DAY_S - 1)
    assert await s.load(acme, "resp_1") is not None
    assert await janitor.sweep_once() == 0
    mock_clock.jump(1)
    assert await s.load(acme, "resp_1") is None
    assert not await s.delete(acme, "resp_1")
    assert await storage.responses.count() == 1  # expired, not yet swept
    assert await janitor.sweep_once() == 1
    assert await storage.responses.count() == 0
    assert janitor.statistics()["expired"] == 1
