"""Which instance this process is, in a way that survives a crash: the owner of what it leaves
unfinished (uploads in progress, blob temporaries), so that its next start can remove them at
once (actors/files_janitor.py) without touching another live instance's.

The data directory holds a random `instance-id` (made once) and one lock file per slot
(`slots/<n>.lock`). A process takes the lowest slot whose lock it can hold (`flock`, exclusive,
non-blocking); the kernel releases a lock when its process dies, however it dies. So a process
that gets slot n knows the previous holder of n is gone, and everything marked with the owner
`<instance-id>-<n>` that predates this process is a leftover. `--workers N` processes sharing a
data dir take different slots; a restarted worker takes the dead one's (the lowest free).

A data dir shared by hosts (NFS) is not supported for this: flock there is not reliable. A
host whose data dir does not survive a restart starts with a new id: its predecessors'
leftovers are then removed by the janitor's staleness rule, as before.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from storage.private_paths import private_dir

ID_FILE = "instance-id"
SLOTS_DIR = "slots"
MAX_SLOTS = 4096


def _instance_id(data_dir: Path) -> str:
    path = data_dir / ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    token = secrets.token_hex(8)
    try:  # O_EXCL: two processes starting at once agree on the first one's id
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token


@contextmanager
def hold_slot(data_dir: Path) -> Iterator[str]:
    """Hold the lowest free slot of `data_dir` for the block; yields the owner name. Blocking
    (file system calls): at start."""
    private_dir(data_dir / SLOTS_DIR)
    instance = _instance_id(data_dir)
    for n in range(MAX_SLOTS):
        fd = os.open(
            data_dir / SLOTS_DIR / f"{n}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield f"{instance}-{n}"
        finally:
            os.close(fd)  # releases the lock
        return
    raise RuntimeError(f"all {MAX_SLOTS} instance slots of {data_dir} are held")
