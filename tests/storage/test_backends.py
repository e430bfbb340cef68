"""The Database interface behaves the same on every backend."""

from __future__ import annotations

import pytest
import trio

from storage import Database, UniqueViolation
from storage.migrate import available, migrate, pending
from storage.open import Storage
from tests.backends import BACKENDS


async def test_migrate_is_idempotent(storage: Storage) -> None:
    assert await pending(storage.db) == []
    assert await migrate(storage.db) == []
    versions = {m.version for m in available()}
    rows = await storage.db.fetch("SELECT version FROM schema_migrations")
    assert {int(r["version"]) for r in rows} == versions


async def test_concurrent_migrate_applies_each_once(database_url: str) -> None:
    from storage.open import open_database

    async with open_database(database_url) as db_a, open_database(database_url) as db_b:
        results: list[int] = []

        async def run(db: Database) -> None:
            results.append(len(await migrate(db)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, db_a)
            nursery.start_soon(run, db_b)
        assert sorted(results) == [0, len(available())]


async def test_transaction_commits_and_rolls_back(storage: Storage) -> None:
    db = storage.db
    await db.execute(
        "INSERT INTO orgs (id, name, plan, created_at) VALUES ('org_a', 'a', 'free', 1)"
    )
    with pytest.raises(RuntimeError):
        async with db.transaction() as tx:
            await tx.execute(
                "INSERT INTO orgs (id, name, plan, created_at) VALUES ('org_b', 'b', 'free', 1)"
            )
            assert await tx.fetchval("SELECT count(*) FROM orgs") == 2
            raise RuntimeError("abort")
    assert await db.fetchval("SELECT count(*) FROM orgs") == 1
    async with db.transaction() as tx:
        rows = await tx.fetch(
            "UPDATE orgs SET plan = :plan WHERE id = :id RETURNING id, plan",
            {"plan": "pro", "id": "org_a"},
        )
    assert rows == [{"id": "org_a", "plan": "pro"}]


async def test_unique_violation_is_mapped(storage: Storage) -> None:
    await storage.orgs.create("same")
    with pytest.raises(UniqueViolation):
        await storage.orgs.create("same")


async def test_cancelled_transaction_rolls_back(storage: Storage) -> None:
    db = storage.db
    with trio.CancelScope() as scope:
        async with db.transaction() as tx:
            await tx.execute(
                "INSERT INTO orgs (id, name, plan, created_at) VALUES ('org_c', 'c', 'free', 1)"
            )
            scope.cancel()
            await trio.sleep(1)
    assert await db.fetchval("SELECT count(*) FROM orgs WHERE id = 'org_c'") == 0
    # The connection is usable afterwards.
    await storage.orgs.create("after-cancel")


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="needs GATEWAY_TEST_DATABASE_URL")
@pytest.mark.parametrize("backend", ["postgresql"])
async def test_cancelled_postgres_query_is_cancelled_on_the_server(storage: Storage) -> None:
    db = storage.db
    marker = "gateway_cancel_probe"
    with trio.move_on_after(0.3) as scope:
        await db.fetch(f"SELECT pg_sleep(30) AS {marker}")
    assert scope.cancelled_caught
    running = await db.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE state = 'active' AND query LIKE :pattern AND pid <> pg_backend_pid()",
        {"pattern": f"%AS {marker}%"},
    )
    assert running == 0
    assert await db.fetchval("SELECT 1") == 1  # the pool is still healthy


async def test_fetch_values_answers_the_columns_in_order(storage: Storage) -> None:
    """Rows as sequences of the selected values (no names), on the database's reads and, by
    the fallback over `fetch`, inside a transaction; the same as `fetch` gives by name."""
    db = storage.db
    for i, name in enumerate(("b", "a", "é")):
        await db.execute(
            "INSERT INTO orgs (id, name, plan, created_at) VALUES (:id, :name, 'free', :at)",
            {"id": f"org_{i}", "name": name, "at": i},
        )
    sql = "SELECT name, NULLIF(created_at, 1) AS at, id FROM orgs ORDER BY id"
    expected = [("b", 0, "org_0"), ("a", None, "org_1"), ("é", 2, "org_2")]
    rows = await db.fetch_values(sql)
    assert [tuple(r) for r in rows] == expected and rows == expected
    assert [tuple(r.values()) for r in await db.fetch(sql)] == expected
    async with db.transaction() as tx:
        assert await tx.fetch_values(sql + " LIMIT :n", {"n": 2}) == expected[:2]
    assert await db.fetch_values("SELECT id FROM orgs WHERE id = 'none'") == []
