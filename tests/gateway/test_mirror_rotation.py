"""A master-key rotation re-seals the shadow answers mirroring stored (storage/keyring.py
SEALED_COLUMNS): they open under the new key, no longer under the old one."""

from __future__ import annotations

import msgspec
import pytest

from gateway.keyring import unlock
from gateway.keyring.rotate import rotate_master_key
from protocol.errors import SecretBoxError
from protocol.secretbox import MIRROR_ANSWERS, SecretBox
from protocol.timefmt import now_us
from services.mirror import MirrorJob, ShadowResult, open_answer, result_row
from storage.mirror_results import MirrorResultRepository
from storage.open import Storage

pytestmark = pytest.mark.storage

OLD = b"o" * 32
NEW = b"n" * 32


async def test_rotation_reseals_mirror_answers(storage: Storage) -> None:
    org = await storage.orgs.create("mirrors")
    await unlock(storage.keyring, OLD)
    answer = msgspec.json.encode({"choices": [{"index": 0, "message": {"content": "hi"}}]})
    job = MirrorJob(
        org_id=org.id,
        key_id=None,
        request_id="req_1",
        route="chat",
        model="small",
        shadow="haiku",
        billed=False,
        body=b"{}",
        primary_latency_ms=1.0,
        primary_prompt_tokens=1,
        primary_completion_tokens=1,
        primary_cost_usd=0.0,
        primary_answer=answer,
    )
    old_box = SecretBox.for_purpose(OLD, MIRROR_ANSWERS)
    repo = MirrorResultRepository(storage.db)
    await repo.write_batch([result_row(job, ShadowResult("ok", answer=answer), old_box, now_us())])
    report = await rotate_master_key(storage.keyring, OLD, NEW)
    assert report.resealed["mirror_results"] == 1 and not report.unreadable
    (row,) = await repo.for_request("req_1")
    assert open_answer(SecretBox.for_purpose(NEW, MIRROR_ANSWERS), row) == answer
    with pytest.raises(SecretBoxError):
        open_answer(old_box, row)
