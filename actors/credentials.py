"""Actors that keep credential bookkeeping off the hot path.

- `LastUsedRecorder` receives "key X was used at T" notes (never awaited by requests: a full
  inbox drops the note, last-use times are advisory) and writes them in one batch per interval
  and once more when stopped.
- `CredentialEpochWatcher` polls the credential epoch that every key change bumps in storage,
  and calls `on_change` (the authenticator drops its cache) when it moves — the way a change
  made through one instance reaches all the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from actors.base import Actor
from actors.inbox import Inbox
from storage.keys import KeyRepository

log = logging.getLogger("gateway.actors")
_FINAL_FLUSH_S = 5.0


class LastUsedRecorder(Actor):
    kind = "batch_writer"

    def __init__(self, keys: KeyRepository, *, interval: float = 1.0, capacity: int = 4096) -> None:
        self.name = "last-used-recorder"
        self._keys = keys
        self._interval = interval
        self._inbox: Inbox[tuple[str, int]] = Inbox(capacity)
        self._pending: dict[str, int] = {}
        self.dropped = 0
        self.flushes = 0

    def note(self, key_id: str, when_us: int) -> None:
        """Record a use without waiting; dropped (and counted) when the inbox is full."""
        try:
            self._inbox.send_nowait((key_id, when_us))
        except trio.WouldBlock:
            self.dropped += 1

    def inbox_depth(self) -> int:
        return self._inbox.depth()

    def inbox_capacity(self) -> int:
        return self._inbox.capacity

    def statistics(self) -> dict[str, object]:
        return {"pending": len(self._pending), "dropped": self.dropped, "flushes": self.flushes}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Collect notes and flush every `interval`; on cancellation, flush once more (shielded,
        bounded) so a graceful stop loses nothing."""
        task_status.started()
        try:
            while True:
                with trio.move_on_after(self._interval):
                    async for key_id, when in self._inbox:
                        self._merge(key_id, when)
                await self.flush()
        finally:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + _FINAL_FLUSH_S
                self._drain()
                await self.flush()

    def _drain(self) -> None:
        while True:
            try:
                key_id, when = self._inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return
            self._merge(key_id, when)

    def _merge(self, key_id: str, when: int) -> None:
        if when > self._pending.get(key_id, 0):
            self._pending[key_id] = when

    async def flush(self) -> None:
        """Write what is pending now (also called by tests and at shutdown)."""
        self._drain()
        if not self._pending:
            return
        batch, self._pending = self._pending, {}
        try:
            await self._keys.record_last_used(batch)
        except BaseException:
            for key_id, when in batch.items():  # keep them for the next try
                self._merge(key_id, when)
            raise
        self.flushes += 1


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
