"""Directories and files the gateway creates on disk, readable by its own user only.

The data directory holds the SQLite database (every organization's keys' hashes, ledgers,
sealed secrets), the encrypted blobs and the generated master key: created 0700 (directories)
and 0600 (files) whatever the process umask allows. SQLite gives the `-wal` and `-shm` files it
creates the database file's own permissions, so creating that file 0600 covers them too.

Paths that exist already are left as they are: an operator may have chosen their permissions
(docs/operations.md says how to tighten an older installation's). Blocking calls: at start or
in a worker thread.
"""

from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> None:
    """Create `path` and each missing parent 0700; existing directories are untouched."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made meanwhile (another worker process)
            continue
        os.chmod(directory, DIR_MODE)  # exactly: a umask could have narrowed the owner's too


def private_file(path: Path) -> None:
    """Create `path` empty, 0600, unless it exists (then it is left as it is)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)
