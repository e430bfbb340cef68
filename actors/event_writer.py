"""The event writer: hot-path events (`completion.*`) written to the outbox in batches, one
transaction per flush (every `flush_interval_s`, at `batch_size` events, and on stop), so that
an inference request never waits for, nor adds, a database commit.

`offer` never blocks: a full buffer drops the event and counts it (`statistics()["dropped"]`).
A crash loses at most the events not yet flushed, as the accountant's usage rows; a flush that
fails keeps its batch (in order, ahead of newer events) and retries it, skipping the events that
turn out stored, so none is written twice. Events that report a change of state (keys, budgets,
provider keys) do not come here: they are written in the change's own transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from actors.base import Actor
from actors.flushing import flush_shielded
from storage.events import EventRepository, NewEvent

log = logging.getLogger("gateway.events")

_FLUSH_LIMIT_S = 10.0  # one flush, in the loop and the final one on stop


@dataclass
class EventWriterStats:
    offered: int = 0
    dropped: int = 0  # the buffer was full
    written: int = 0
    flushes: int = 0  # transactions that wrote at least one event
    flush_failures: int = 0


class EventWriter(Actor):
    kind = "batch_writer"

    def __init__(
        self,
        events: EventRepository,
        *,
        flush_interval_s: float = 0.1,
        batch_size: int = 500,
        capacity: int = 10_000,
    ) -> None:
        self.name = "event-writer"
        self._events = events
        self._flush_interval_s = flush_interval_s
        self._batch_size = batch_size
        self._capacity = capacity
        self._buffer: list[NewEvent] = []
        self._retry = False  # the buffer's head failed once: its outcome is unknown
        self._wake = trio.Event()
        self._lock = trio.Lock()  # one flush at a time (the loop, tests, the final flush)
        self.stats = EventWriterStats()

    def offer(self, event: NewEvent) -> bool:
        """Queue `event` for the next flush without waiting; False (counted) when the buffer
        is full."""
        self.stats.offered += 1
        if len(self._buffer) >= self._capacity:
            self.stats.dropped += 1
            return False
        self._buffer.append(event)
        if len(self._buffer) >= self._batch_size:
            self._wake.set()
        return True

    def inbox_depth(self) -> int:
        return len(self._buffer)

    def inbox_capacity(self) -> int:
        return self._capacity

    def statistics(self) -> dict[str, object]:
        s = self.stats
        return {
            "queued": len(self._buffer),
            "offered": s.offered,
            "written": s.written,
            "dropped": s.dropped,
            "flushes": s.flushes,
            "flush_failures": s.flush_failures,
        }

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                with trio.move_on_after(self._flush_interval_s):
                    await self._wake.wait()
                self._wake = trio.Event()
                if not await flush_shielded(self.flush, _FLUSH_LIMIT_S):
                    log.error("an event flush took over %s s; its batch is retried", _FLUSH_LIMIT_S)
        finally:  # stopping: write what is buffered
            if not await flush_shielded(self.flush, _FLUSH_LIMIT_S) or self._buffer:
                log.error("stopping: %d events were not written", len(self._buffer))

    async def flush(self) -> None:
        """Write everything buffered so far in one transaction. On failure the batch goes back
        to the head of the buffer and is retried on the next flush."""
        async with self._lock:
            if not self._buffer:
                return
            batch, retry = self._buffer, self._retry
            self._buffer, self._retry = [], False
            written: int | None = None
            try:
                written = await self._events.write_batch(batch, skip_stored=retry)
            except Exception:
                log.exception("writing %d events failed; retrying", len(batch))
            finally:
                if written is None:  # failed, or cut off by the limit: outcome unknown
                    self.stats.flush_failures += 1
                    self._buffer = batch + self._buffer
                    self._retry = True
            if written is not None:
                self.stats.flushes += 1
                self.stats.written += written
