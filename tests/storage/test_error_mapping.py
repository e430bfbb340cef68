"""Only connection-level failures are StorageUnavailable (a 503 "retry shortly"); a bug such
as a missing table propagates as itself (a 500 with its traceback), on both backends."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from storage import sqlite as sqlite_backend
from storage.errors import StorageError, StorageUnavailable
from storage.open import Storage


async def test_a_missing_table_is_a_bug_not_unavailable(storage: Storage) -> None:
    with pytest.raises(Exception) as raised:
        await storage.db.fetch("SELECT * FROM no_such_table")
    assert not isinstance(raised.value, StorageError)
    with pytest.raises(Exception) as raised:
        async with storage.db.transaction() as tx:
            await tx.execute("UPDATE no_such_table SET x = 1")
    assert not isinstance(raised.value, StorageError)


@pytest.mark.parametrize(
    ("code", "unavailable"),
    [
        (sqlite3.SQLITE_BUSY, True),
        (sqlite3.SQLITE_LOCKED, True),
        (sqlite3.SQLITE_IOERR, True),
        (sqlite3.SQLITE_IOERR | (3 << 8), True),  # an extended code: SQLITE_IOERR_WRITE
        (sqlite3.SQLITE_FULL, True),
        (sqlite3.SQLITE_CANTOPEN, True),
        (sqlite3.SQLITE_READONLY, True),
        (sqlite3.SQLITE_ERROR, False),  # no such table, syntax errors
        (sqlite3.SQLITE_INTERRUPT, False),
    ],
)
def test_sqlite_maps_only_connection_level_codes(code: int, unavailable: bool) -> None:
    error = sqlite3.OperationalError("x")
    error.sqlite_errorcode = code
    with pytest.raises(Exception) as raised, sqlite_backend._mapped_errors():
        raise error
    assert isinstance(raised.value, StorageUnavailable) == unavailable
    assert raised.value is error or unavailable


async def test_sqlite_locked_past_the_busy_timeout_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_backend, "_BUSY_TIMEOUT_MS", 50)
    path = str(tmp_path / "locked.db")
    db = sqlite_backend.open_sqlite(path)
    try:
        await db.execute("CREATE TABLE t (x INTEGER)")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holding the write lock
        try:
            with pytest.raises(StorageUnavailable, match="locked"):
                await db.execute("INSERT INTO t (x) VALUES (1)")
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert await db.execute("INSERT INTO t (x) VALUES (2)") == 1
    finally:
        await db.aclose()
