"""The master key: from configuration, or generated once and kept under the data dir.

Everything secret at rest is sealed under it (the keyring's credential pepper, provider keys,
webhook secrets, files' data keys). Losing it makes every stored credential unusable, so a
generated one is written with 0600 permissions and a warning tells operators to set
GATEWAY_MASTER_KEY in production. `gateway admin rotate-master-key` replaces the file
(`write_key_file`: a new file renamed over the old one, never a half-written key).
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
from pathlib import Path

from storage.private_paths import private_dir

log = logging.getLogger("gateway.secrets")

MASTER_KEY_FILE = "master.key"
NEXT_KEY_FILE = "master.key.new"  # a rotation's new key, until the database is under it
_KEY_BYTES = 32


class MasterKeyError(Exception):
    pass


def load_master_key(configured: bytes | None, data_dir: Path) -> bytes:
    if configured is not None:
        return configured
    path = data_dir / MASTER_KEY_FILE
    if path.exists():
        return read_key_file(path)
    key = secrets.token_bytes(_KEY_BYTES)
    private_dir(data_dir)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(base64.b64encode(key).decode() + "\n")
    log.warning(
        "no GATEWAY_MASTER_KEY given: generated one in %s; set GATEWAY_MASTER_KEY in production "
        "and keep it safe (stored credentials are unusable without it)",
        path,
    )
    return key


def read_key_file(path: Path) -> bytes:
    try:
        key = base64.b64decode(path.read_text().strip(), validate=True)
    except ValueError as exc:
        raise MasterKeyError(f"{path}: not base64") from exc
    if len(key) != _KEY_BYTES:
        raise MasterKeyError(f"{path}: must hold {_KEY_BYTES} bytes, base64-encoded")
    return key


def write_key_file(path: Path, key: bytes) -> None:
    """`key` into `path` atomically: a temporary file (0600) written and fsynced, renamed over
    `path`, and the directory fsynced, so a crash leaves the old file or the new, whole."""
    if len(key) != _KEY_BYTES:
        raise ValueError(f"a master key must be {_KEY_BYTES} bytes")
    private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(base64.b64encode(key).decode() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    sync_directory(path.parent)


def sync_directory(directory: Path) -> None:
    """fsync a directory, so a rename in it survives a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
