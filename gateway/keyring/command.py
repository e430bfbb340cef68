"""`gateway admin rotate-master-key`: where the two keys come from and where the new one goes.

The current key is the configured one (GATEWAY_MASTER_KEY or `master_key`), else the one in
`<data_dir>/master.key`. The new key is GATEWAY_NEW_MASTER_KEY, else generated. It is kept
somewhere durable *before* any row is re-sealed under it, so an interruption never leaves rows
under a key nobody has:

- current key in `master.key`: the new key is written to `master.key.new` (0600, fsynced) first,
  and renamed over `master.key` once the database is under it. A run that finds
  `master.key.new` (an interrupted one) carries on with that key.
- current key configured, new key generated: it is printed once, before anything changes, and
  the operator sets GATEWAY_MASTER_KEY to it. (Refused while a rotation is under way: the run
  must go on to the key it started with, given as GATEWAY_NEW_MASTER_KEY.)
- current key configured, new key given: the operator has it already; nothing is printed.

Exit codes: 0 the database is under the new key; 1 it is not (message on stderr: the key does
not match, a rotation to another key is unfinished, a database error); 2 a bad
GATEWAY_NEW_MASTER_KEY. No key is ever logged.
"""

from __future__ import annotations

import base64
import secrets
import sys
from collections.abc import Mapping

from gateway.config import Config
from gateway.config.loader import master_key_variable
from gateway.config.master_key import (
    MASTER_KEY_FILE,
    NEXT_KEY_FILE,
    MasterKeyError,
    read_key_file,
    sync_directory,
    write_key_file,
)
from gateway.errors import RotationError
from gateway.keyring.rotate import RotationReport, rotate_master_key
from protocol.keyring import key_id
from storage.open import open_storage

NEW_KEY_ENV = "GATEWAY_NEW_MASTER_KEY"


async def rotate_command(config: Config, environ: Mapping[str, str]) -> int:
    key_file = config.data_dir / MASTER_KEY_FILE
    next_file = config.data_dir / NEXT_KEY_FILE
    from_file = config.master_key is None
    if config.master_key is not None:
        current = config.master_key
    elif key_file.exists():
        current = read_key_file(key_file)
    else:
        raise MasterKeyError(
            f"no master key to rotate: GATEWAY_MASTER_KEY is not set and {key_file} does not exist"
        )
    new = _given_new_key(environ)
    if from_file and next_file.exists():
        pending = read_key_file(next_file)
        if new is not None and new != pending:
            raise RotationError(
                f"{next_file} holds the key an interrupted rotation went to, and"
                f" {NEW_KEY_ENV} is another: unset {NEW_KEY_ENV} to finish that rotation"
            )
        new = pending
    async with open_storage(config.database_url) as storage:
        generated = new is None
        if new is None:
            record = await storage.keyring.get()
            if record is not None and record.next_master_key_id is not None:
                raise RotationError(
                    f"a rotation to the master key with id {record.next_master_key_id} was"
                    f" started and not finished: run the command again with {NEW_KEY_ENV} set"
                    " to that key"
                )
            if record is not None and record.master_key_id != key_id(current):
                raise MasterKeyError(
                    f"the master key (id {key_id(current)}) is not this database's"
                    f" (id {record.master_key_id})"
                )
            new = secrets.token_bytes(32)
        if from_file:
            if not next_file.exists():
                write_key_file(next_file, new)
        elif generated:
            print("new master key (shown once; store it now, the rotation starts with it):")
            print(base64.b64encode(new).decode(), flush=True)
        report = await rotate_master_key(storage.keyring, current, new)
    if from_file:
        next_file.replace(key_file)
        sync_directory(key_file.parent)
    _print_report(report, key_id(new))
    if from_file:
        print(f"{key_file} now holds the new master key.")
        print("Restart every instance now: running ones still hold the old key in memory.")
    else:
        where = "the key printed above" if generated else f"the value of {NEW_KEY_ENV}"
        print(
            f"Set GATEWAY_MASTER_KEY (or master_key in the config file) to {where} and restart"
            " every instance now: running ones still hold the old key in memory."
        )
    return 0


def _given_new_key(environ: Mapping[str, str]) -> bytes | None:
    return master_key_variable(environ, NEW_KEY_ENV)


def _print_report(report: RotationReport, new_id: str) -> None:
    done = ", ".join(f"{table} {count}" for table, count in report.resealed.items())
    if report.finished_earlier:
        print(f"the database was under the new master key (id {new_id}) already;", end=" ")
        print(f"values still under the old key re-sealed: {done}")
    else:
        print(f"the database is now under the new master key (id {new_id})")
        print(f"sealed values re-sealed: {done}")
    for table, ids in report.unreadable.items():
        shown = ", ".join(ids[:20]) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
        print(
            f"gateway: warning: {table}: {len(ids)} row(s) hold a value neither key opens (left"
            f" as they were; unreadable before the rotation too): {shown}",
            file=sys.stderr,
        )
