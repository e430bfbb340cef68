"""`executemany` on every backend: one statement per parameter set, inside the transaction."""

from __future__ import annotations

import pytest

from storage import UniqueViolation
from storage.open import Storage


async def test_executemany_inserts_every_row_and_rolls_back_with_the_transaction(
    storage: Storage,
) -> None:
    db = storage.db
    sql = "INSERT INTO orgs (id, name, plan, created_at) VALUES (:id, :name, :plan, :at)"
    rows = [{"id": f"org_{i}", "name": f"n{i}", "plan": "free", "at": i} for i in range(50)]
    async with db.transaction() as tx:
        await tx.executemany(sql, rows)
    assert await db.fetchval("SELECT count(*) FROM orgs") == 50
    with pytest.raises(UniqueViolation):
        async with db.transaction() as tx:
            await tx.executemany(sql, [{"id": "org_x", "name": "x", "plan": "free", "at": 0}])
            await tx.executemany(sql, rows[:1])  # a duplicate: the whole transaction goes
    assert await db.fetchval("SELECT count(*) FROM orgs") == 50
