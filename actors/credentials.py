"""Actors that keep credential bookkeeping off the hot path.

- `LastUsedRecorder` receives "key X was used at T" notes (never awaited by requests: a full
  inbox drops the note, last-use times are advisory) and writes them in one batch per interval
  and once more when stopped (a `BatchWriter`, actors/batch_writer.py).
- `CredentialEpochWatcher` polls the credential epoch that every key change bumps in storage,
  and calls `on_change` (the authenticator drops its cache) when it moves — the way a change
  made through one instance reaches all the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec
import trio

from actors.base import Actor
from actors.batch_writer import BatchWriter
from actors.settings import DEFAULTS, ActorSettings
from storage.keys import KeyRepository

log = logging.getLogger("gateway.actors")


class LastUsedRecorder(BatchWriter[tuple[str, int]]):
    """A `BatchWriter` of (key id, when) notes. The authenticator sends at most one note per
    key and second; each write keeps the latest time per key (one row update per key)."""

    def __init__(
        self,
        keys: KeyRepository,
        *,
        settings: ActorSettings | None = None,
        interval: float = 1.0,
        capacity: int | None = None,
    ) -> None:
        settings = settings or msgspec.structs.replace(
            DEFAULTS["batch_writer"], inbox_capacity=4096
        )
        if capacity is not None:
            settings = msgspec.structs.replace(settings, inbox_capacity=capacity)

        async def write(batch: list[tuple[str, int]]) -> int:
            latest: dict[str, int] = {}
            for key_id, when in batch:
                if when > latest.get(key_id, 0):
                    latest[key_id] = when
            await keys.record_last_used(latest)
            return len(latest)

        super().__init__("last-used-recorder", write, settings=settings, flush_interval_s=interval)

    def note(self, key_id: str, when_us: int) -> None:
        """Record a use without waiting; dropped (and counted) when the inbox is full."""
        self.offer((key_id, when_us))

    @property
    def dropped(self) -> int:
        return self.stats.dropped

    @property
    def flushes(self) -> int:
        return self.stats.flushes


class CredentialEpochWatcher(Actor):
    def __init__(
        self, keys: KeyRepository, on_change: Callable[[], None], *, interval: float = 1.0
    ) -> None:
        self.name = "credential-epoch-watcher"
        self._keys = keys
        self._on_change = on_change
        self._interval = interval
        self._epoch: int | None = None
        self.changes_seen = 0

    def statistics(self) -> dict[str, object]:
        return {"epoch": self._epoch, "changes_seen": self.changes_seen}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._epoch = await self._keys.credentials_epoch()
        task_status.started()
        while True:
            await trio.sleep(self._interval)
            await self.poll_once()

    async def poll_once(self) -> bool:
        """Read the epoch now; True (and `on_change` called) if it moved."""
        epoch = await self._keys.credentials_epoch()
        if epoch == self._epoch:
            return False
        self._epoch = epoch
        self.changes_seen += 1
        self._on_change()
        return True
