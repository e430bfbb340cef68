"""`[database] statement_timeout_s` on SQLite: a write waiting on another process's lock, or on
this process's own transaction, gives up after the timeout with StorageUnavailable (503)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import trio

from storage.errors import StorageUnavailable
from storage.open import open_database

TIMEOUT_S = 0.3


async def test_a_write_behind_another_process_lock_gives_up_after_the_timeout(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.db"
    async with open_database(f"sqlite:///{path}", timeout_s=TIMEOUT_S) as db:
        await db.execute("CREATE TABLE t (x INTEGER)")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holding the write lock
        try:
            started = time.monotonic()
            with pytest.raises(StorageUnavailable):
                async with db.transaction() as tx:
                    await tx.execute("INSERT INTO t (x) VALUES (1)")
            assert TIMEOUT_S * 0.8 < time.monotonic() - started < TIMEOUT_S + 0.5
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert await db.execute("INSERT INTO t (x) VALUES (2)") == 1


async def test_a_write_behind_a_long_transaction_of_this_process_gives_up_after_the_timeout(
    tmp_path: Path,
) -> None:
    path = tmp_path / "busy.db"
    async with open_database(f"sqlite:///{path}", timeout_s=TIMEOUT_S) as db:
        await db.execute("CREATE TABLE t (x INTEGER)")
        release = trio.Event()
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                async with db.transaction() as tx:
                    await tx.execute("INSERT INTO t (x) VALUES (1)")
                    await release.wait()

            nursery.start_soon(hold)
            await trio.sleep(0.05)
            started = time.monotonic()
            with pytest.raises(StorageUnavailable):
                async with db.transaction() as tx:
                    await tx.execute("INSERT INTO t (x) VALUES (2)")
            assert TIMEOUT_S * 0.8 < time.monotonic() - started < TIMEOUT_S + 0.5
            release.set()
        assert await db.fetch("SELECT x FROM t") == [{"x": 1}]
