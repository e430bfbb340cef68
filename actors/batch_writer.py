"""`BatchWriter[T]`: an actor that collects fire-and-forget items in a bounded inbox and writes
them in batches, so that the senders (the hot path) never wait for, nor add, a commit.

A batch is written when `max_batch` items are waiting, every `flush_interval_s` (Trio's clock),
when a sender asks for it (`offer(..., urgent=True)`, `flush()`), and once more when the actor
stops. Each write runs shielded and bounded (actors/flushing.py): a stop waits for the write in
progress up to `flush_limit_s`. A write that fails, or is cut off (its outcome unknown), keeps
its batch at the head, in order, and the next flush writes it again with `rewrite` (e.g. one
that skips the rows already stored), so nothing is lost and, with such a `rewrite`, nothing is
written twice. The inbox's `overflow` (settings kind "batch_writer") says what a full inbox
does: `put` applies it fully; `offer` never waits, so under "wait" or "reject" it refuses the
new item (counted in `dropped`), under "drop_oldest" it drops the oldest.

Users: the event writer (actors/event_writer.py), the last-used recorder
(actors/credentials.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

from actors.base import Actor
from actors.flushing import flush_shielded
from actors.inbox import Inbox
from actors.settings import DEFAULTS, ActorSettings

T = TypeVar("T")
Write = Callable[[list[T]], Awaitable[int | None]]
"""Writes one batch; returns how many rows it wrote when that can be fewer (a rewrite that
skips rows already stored), else None."""

log = logging.getLogger("gateway.actors")

FLUSH_LIMIT_S = 10.0


@dataclass
class BatchWriterStats:
    offered: int = 0  # messages handed to the writer (offer and put)
    dropped: int = 0  # refused or dropped because the inbox was full
    written: int = 0  # rows (items) written
    flushes: int = 0  # batches written (one write call each)
    flush_failures: int = 0  # writes that failed or were cut off (their batch is retried)


class BatchWriter(Actor, Generic[T]):
    kind = "batch_writer"

    def __init__(
        self,
        name: str,
        write: Write[T],
        *,
        rewrite: Write[T] | None = None,
        settings: ActorSettings | None = None,
        max_batch: int = 500,
        flush_interval_s: float = 0.1,
        flush_limit_s: float = FLUSH_LIMIT_S,
    ) -> None:
        settings = settings or DEFAULTS["batch_writer"]
        self.name = name
        self._write = write
        self._rewrite = rewrite or write
        self._max_batch = max_batch
        self._flush_interval_s = flush_interval_s
        self._flush_limit_s = flush_limit_s
        self._inbox: Inbox[T] = Inbox(
            settings.inbox_capacity, overflow=settings.overflow, name=name
        )
        self._buffer: list[T] = []  # received, not yet written (a failed batch first)
        self._retry = False  # the buffer's head failed once: its outcome is unknown
        self._urgent = False
        self._lock = trio.Lock()  # one write at a time (the loop, `flush`, the final flush)
        self.stats = BatchWriterStats()

    # -- senders ------------------------------------------------------------------------

    def offer(self, item: T, *, urgent: bool = False) -> bool:
        """Queue `item` without waiting. False (counted in `dropped`) when the inbox is full
        and its overflow is "wait" or "reject"; under "drop_oldest" the oldest waiting item
        makes room. `urgent`: write soon, without waiting for the interval."""
        self.stats.offered += 1
        try:
            if self.queued() >= self._inbox.capacity:  # a failed batch kept counts too
                raise trio.WouldBlock
            self._inbox.send_nowait(item)
        except trio.WouldBlock:
            if self._inbox.overflow != "drop_oldest" or not self._inbox.depth():
                self.stats.dropped += 1
                return False
            self._inbox.receive_nowait()
            self._inbox.dropped += 1
            self.stats.dropped += 1
            self._inbox.send_nowait(item)
        if urgent:
            self._urgent = True
        return True

    async def put(self, item: T) -> None:
        """Queue `item` the way the inbox's overflow says (may wait, or raise `InboxFull`)."""
        self.stats.offered += 1
        dropped = self._inbox.dropped
        try:
            await self._inbox.put(item)
        except Exception:
            self.stats.dropped += 1
            raise
        self.stats.dropped += self._inbox.dropped - dropped

    # -- the admin tree -----------------------------------------------------------------

    def queued(self) -> int:
        """Items not yet written: in the inbox, and received but waiting for their write."""
        return self._inbox.depth() + len(self._buffer)

    def inbox_depth(self) -> int:
        return self._inbox.depth()

    def inbox_capacity(self) -> int:
        return self._inbox.capacity

    def handling(self) -> tuple[int, float | None]:
        return self._inbox.handling()

    def statistics(self) -> dict[str, object]:
        s = self.stats
        return {
            "queued": self.queued(),
            "offered": s.offered,
            "written": s.written,
            "dropped": s.dropped,
            "flushes": s.flushes,
            "flush_failures": s.flush_failures,
            "inbox": self._inbox.statistics(),
        }

    # -- the actor ----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                with trio.move_on_after(self._flush_interval_s):
                    while not self._full():
                        self._buffer.append(await self._inbox.receive())
                        self._take_waiting()
                self._urgent = False
                if not await flush_shielded(self.flush, self._flush_limit_s):
                    log.error(
                        "%s: a write took over %s s; its batch is retried",
                        self.name,
                        self._flush_limit_s,
                    )
                if self._retry:  # failed: try again after an interval, not in a loop
                    await trio.sleep(self._flush_interval_s)
        finally:  # stopping (or crashed): write what is left
            if not await flush_shielded(self.flush, self._flush_limit_s) or self.queued():
                log.error("%s stopping: %d items were not written", self.name, self.queued())

    def _full(self, *, urgent_too: bool = True) -> bool:
        return (urgent_too and self._urgent) or len(self._buffer) >= self._max_batch

    def _take_waiting(self, *, urgent_too: bool = True) -> None:
        """Move what already waits in the inbox to the buffer, up to a full batch."""
        while not self._full(urgent_too=urgent_too):
            try:
                self._buffer.append(self._inbox.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return

    async def flush(self) -> None:
        """Write everything received so far, `max_batch` items a call (a retried batch first,
        whole). On failure the batch goes back to the head of the buffer and is retried on the
        next flush."""
        async with self._lock:
            while True:
                self._take_waiting(urgent_too=False)
                if not self._buffer or not await self._write_buffer():
                    return

    async def _write_buffer(self) -> bool:
        batch, retry = self._buffer, self._retry
        self._buffer, self._retry = [], False
        written = False
        rows: int | None = None
        began = trio.current_time()
        try:
            rows = await (self._rewrite if retry else self._write)(batch)
            written = True
            seconds = trio.current_time() - began
            for _ in batch:  # each item waited for the whole write
                self._inbox.handled(seconds)
        except Exception:
            log.exception("%s: writing %d items failed; retrying", self.name, len(batch))
        finally:
            if not written:  # failed, or cut off by the limit: outcome unknown
                self.stats.flush_failures += 1
                self._buffer = batch + self._buffer
                self._retry = True
        if written:
            self.stats.flushes += 1
            self.stats.written += len(batch) if rows is None else rows
        return written
