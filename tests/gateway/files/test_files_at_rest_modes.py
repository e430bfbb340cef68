"""Files at rest are the gateway user's only (issue #19, item 12): a fresh data dir, its
SQLite database with the -wal and -shm files, the blob store's directories, blobs and
temporaries, and a generated master key are created 0700/0600 whatever the umask lets through.
Run over real HTTP on both backends (the database file only where it is SQLite)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.files.conftest import files_gateway
from tests.gateway.files.support import uploaded

pytestmark = pytest.mark.storage


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """The common default, which made the database 0644 and the directories 0755 before."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


async def test_a_fresh_data_dir_is_private(
    database_url: str, tmp_path: Path, permissive_umask: None
) -> None:
    data_dir = tmp_path / "srv" / "gateway"  # nothing of it exists yet
    if database_url.startswith("sqlite"):
        database_url = f"sqlite:///{data_dir}/gateway.db"
    env = {
        "GATEWAY_MASTER_KEY": "",  # none given: generated into <data_dir>/master.key
        "GATEWAY_DATA_DIR": str(data_dir),  # the harness's own dir holds only the config file
    }
    async with files_gateway("local", database_url, tmp_path / "config", None, env=env) as fg:
        await uploaded(fg, b"private bytes\n")
        await uploaded(fg, b"more\n", filename="../../x.txt")
        files = [p for p in data_dir.rglob("*") if p.is_file()]
        directories = [data_dir, tmp_path / "srv", *(p for p in data_dir.rglob("*") if p.is_dir())]
        blobs = [p for p in files if "blobs" in p.parts and ".tmp" not in p.parts]
        assert len(blobs) == 2
        assert (data_dir / "blobs" / ".tmp").is_dir()
        if database_url.startswith("sqlite"):
            names = {p.name for p in files}
            assert {"gateway.db", "gateway.db-wal", "gateway.db-shm"} <= names
        assert (data_dir / "master.key").is_file()
        for directory in directories:
            if directory.name != "metrics":  # the server's own, not secret
                assert _mode(directory) == 0o700, directory
        for file in files:
            if "metrics" not in file.parts:
                assert _mode(file) == 0o600, file
