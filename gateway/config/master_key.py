"""The master key: from configuration, or generated once and kept under the data dir.

Everything secret at rest derives from it (the credential pepper now; data-key wrapping later).
Losing it makes every stored credential unusable, so a generated one is written with 0600
permissions and a warning tells operators to set GATEWAY_MASTER_KEY in production.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
from pathlib import Path

log = logging.getLogger("gateway.secrets")

MASTER_KEY_FILE = "master.key"
_KEY_BYTES = 32


class MasterKeyError(Exception):
    pass


def load_master_key(configured: bytes | None, data_dir: Path) -> bytes:
    if configured is not None:
        return configured
    path = data_dir / MASTER_KEY_FILE
    if path.exists():
        try:
            key = base64.b64decode(path.read_text().strip(), validate=True)
        except ValueError as exc:
            raise MasterKeyError(f"{path}: not base64") from exc
        if len(key) != _KEY_BYTES:
            raise MasterKeyError(f"{path}: must hold {_KEY_BYTES} bytes, base64-encoded")
        return key
    key = secrets.token_bytes(_KEY_BYTES)
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(base64.b64encode(key).decode() + "\n")
    log.warning(
        "no GATEWAY_MASTER_KEY given: generated one in %s; set GATEWAY_MASTER_KEY in production "
        "and keep it safe (stored credentials are unusable without it)",
        path,
    )
    return key
