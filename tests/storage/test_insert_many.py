"""`insert_many` on every backend: one insert per row, inside the transaction."""

from __future__ import annotations

import pytest

from storage import UniqueViolation
from storage.database import Executor
from storage.open import Storage

_COLUMNS = ("id", "name", "plan", "created_at")


async def test_insert_many_inserts_every_row_and_rolls_back_with_the_transaction(
    storage: Storage,
) -> None:
    db = storage.db
    rows = [(f"org_{i}", f"n{i}", "free", i) for i in range(50)]
    async with db.transaction() as tx:
        await tx.insert_many("orgs", _COLUMNS, rows)
    assert await db.fetchval("SELECT count(*) FROM orgs") == 50
    assert await db.fetchrow("SELECT * FROM orgs WHERE id = 'org_7'") == {
        "id": "org_7",
        "name": "n7",
        "plan": "free",
        "created_at": 7,
    }
    with pytest.raises(UniqueViolation):
        async with db.transaction() as tx:
            await tx.insert_many("orgs", _COLUMNS, [("org_x", "x", "free", 0)])
            # a duplicate: the whole transaction goes
            await tx.insert_many("orgs", _COLUMNS, rows[:1])
    assert await db.fetchval("SELECT count(*) FROM orgs") == 50


async def test_every_row_of_a_batch_of_any_size_is_inserted_in_order(storage: Storage) -> None:
    rows = [(f"org_{i:04d}", f"n{i}", "free", i) for i in range(1, 600)]  # 599: all chunk sizes
    async with storage.db.transaction() as tx:
        await tx.insert_many("orgs", _COLUMNS, rows)
    stored = await storage.db.fetch("SELECT id, created_at FROM orgs ORDER BY created_at")
    assert [(r["id"], r["created_at"]) for r in stored] == [(r[0], r[3]) for r in rows]


async def test_the_fallback_inserts_one_row_at_a_time(storage: Storage) -> None:
    async with storage.db.transaction() as tx:
        await Executor.insert_many(tx, "orgs", _COLUMNS, [("org_a", "a", "pro", 1)])
    assert await storage.db.fetchval("SELECT plan FROM orgs WHERE id = 'org_a'") == "pro"
