"""Revoking a management key while a running instance records key use: both lock the org's
management key rows, and they must take them in the same order (by id), or PostgreSQL ends one
of them with a deadlock. The recorder (`KeyRepository.record_last_used`) writes in id order."""

from __future__ import annotations

import secrets

import trio

from protocol.credentials import NewCredential
from storage.open import Storage
from storage.orgs import Revoke
from tests.waiting import wait_until_async


async def test_revoke_while_use_is_recorded(storage: Storage) -> None:
    if storage.db.dialect != "postgresql":
        return  # SQLite's write transactions run one at a time: nothing to interleave
    org = await storage.orgs.create("lock-order")
    for n in range(3):
        credential = NewCredential(f"v{n}", secrets.token_hex(16), f"p{n}")
        await storage.orgs.add_management_key(org.id, credential)
    ids = sorted(k.id for k in await storage.orgs.list_management_keys(org.id))
    low, high = ids[0], ids[-1]
    # An update writes a new row version at the end of the table: a scan now meets `low` last,
    # so locking "in scan order" would take `high` before `low`.
    await storage.db.execute(
        "UPDATE management_keys SET key_prefix = key_prefix WHERE id = :id", {"id": low}
    )
    outcome: list[Revoke] = []

    async def revoke() -> None:
        outcome.append(await storage.orgs.revoke_management_key(org.id, high))

    async def revoke_waits() -> bool:
        waiting = await storage.db.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND query LIKE '%management_keys%FOR UPDATE%'"
        )
        return int(waiting) == 1

    recorded = "UPDATE management_keys SET last_used_at = :when WHERE id = :id"
    async with trio.open_nursery() as nursery:
        async with storage.db.transaction() as tx:  # the recorder's batch, in id order
            await tx.execute(recorded, {"when": 1, "id": low})
            nursery.start_soon(revoke)
            await wait_until_async(revoke_waits)
            await tx.execute(recorded, {"when": 1, "id": high})
    assert outcome == [Revoke.REVOKED]
