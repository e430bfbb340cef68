"""storage/private_paths.py and its users: what the gateway creates on disk is 0700/0600, and
what exists already (an older installation's 0644 database) keeps its mode and keeps working."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.blobs.local import LocalBlobStore
from storage.migrate import migrate
from storage.open import open_database
from storage.private_paths import private_dir, private_file


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_missing_directories_are_made_private_existing_ones_left(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    private_dir(shared / "a" / "b")
    assert _mode(shared) == 0o755
    assert _mode(shared / "a") == 0o700 and _mode(shared / "a" / "b") == 0o700
    private_dir(shared / "a" / "b")  # idempotent
    private_file(shared / "a" / "f")
    assert _mode(shared / "a" / "f") == 0o600
    (shared / "a" / "f").write_text("kept")
    private_file(shared / "a" / "f")
    assert (shared / "a" / "f").read_text() == "kept"


async def test_a_new_sqlite_database_and_its_wal_are_private(tmp_path: Path) -> None:
    path = tmp_path / "var" / "gateway.db"
    async with open_database(f"sqlite:///{path}") as db:
        await migrate(db)
        await db.execute("CREATE TABLE probe (x INTEGER)")
        for name in ("gateway.db", "gateway.db-wal", "gateway.db-shm"):
            assert _mode(path.parent / name) == 0o600, name
    assert _mode(path.parent) == 0o700


async def test_an_existing_database_keeps_working_and_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    sqlite3.connect(path).close()  # as an older version left it
    os.chmod(path, 0o644)
    async with open_database(f"sqlite:///{path}") as db:
        await migrate(db)
        assert await db.fetchval("SELECT count(*) FROM schema_migrations") > 0
    assert _mode(path) == 0o644


async def test_the_local_blob_store_makes_private_directories_and_blobs(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "data" / "blobs")
    async with await store.open_writer("files/org_a/file_b") as writer:
        await writer.write(b"bytes")
        await writer.commit()
    root = tmp_path / "data" / "blobs"
    for directory in (tmp_path / "data", root, root / ".tmp", root / "files", root / "files/org_a"):
        assert _mode(directory) == 0o700, directory
    assert _mode(root / "files" / "org_a" / "file_b") == 0o600
