"""`BatchWriter[T]`: an actor that collects fire-and-forget items in a bounded inbox and writes
them in batches, so that the senders (the hot path) never wait for, nor add, a commit.

A batch is written when `max_batch` items are waiting, every `flush_interval_s` (Trio's clock),
when a sender asks for it (`offer(..., urgent=True)`, `flush()`), and once more when the actor
stops. Between writes the loop waits for the interval or for a batch to be due, not for each
item: an offer on the hot path is an append to the inbox, without waking the writer. Each
write runs shielded and bounded (actors/flushing.py): a stop waits for the write in progress up
to `flush_limit_s`. A write that fails, or is cut off (its outcome unknown), keeps
its batch at the head, in order, and the next flush writes it again with `rewrite` (e.g. one
that skips the rows already stored), so nothing is lost and, with such a `rewrite`, nothing is
written twice. The inbox's `overflow` (settings kind "batch_writer") says what a full inbox
does: `put` applies it fully; `offer` never waits, so under "wait" or "reject" it refuses the
new item (counted in `dropped`), under "drop_oldest" it drops the oldest.

`keep_all=True` is for items that carry money (the accountant's usage rows): an item is never
refused nor dropped. `offer` always takes it, and the inbox's capacity bounds the admission of
new work instead: the sender of the work that will produce items (a reservation) awaits
`room()` first, which waits while `inbox_capacity` items are queued (overflow "wait") or
raises `InboxFull` (overflow "reject"); "drop_oldest" is refused at construction (and by the
config for the kinds whose actors carry money). So the queue holds at most the capacity plus
the work already admitted.

Users: the event writer (actors/event_writer.py), the last-used recorder
(actors/credentials.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio
import trio.lowlevel

from actors.base import Actor
from actors.errors import InboxFull
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
        keep_all: bool = False,
    ) -> None:
        settings = settings or DEFAULTS["batch_writer"]
        if keep_all and settings.overflow == "drop_oldest":
            raise ValueError(
                f"{name} keeps every item (money): overflow drop_oldest would lose some"
            )
        self.name = name
        self._write = write
        self._rewrite = rewrite or write
        self._max_batch = max_batch
        self._flush_interval_s = flush_interval_s
        self._flush_limit_s = flush_limit_s
        self._keep_all = keep_all
        self._inbox: Inbox[T] = Inbox(
            settings.inbox_capacity, overflow=settings.overflow, name=name, unbounded=keep_all
        )
        self._drained = trio.Event()  # set (and replaced) after each write: room may be free
        self._buffer: list[T] = []  # received, not yet written (a failed batch first)
        self._retry = False  # the buffer's head failed once: its outcome is unknown
        self._writing = 0  # items in the write in progress
        self._urgent = False
        # Set when a batch is due before the interval (urgent, or max_batch waiting). The loop
        # waits on it rather than receiving item by item: a sender's offer is then a buffer
        # append, not a wake-up and a task switch of the writer per item.
        self._due = trio.Event()
        self._lock = trio.Lock()  # one write at a time (the loop, `flush`, the final flush)
        self.stats = BatchWriterStats()

    # -- senders ------------------------------------------------------------------------

    def offer(self, item: T, *, urgent: bool = False) -> bool:
        """Queue `item` without waiting. False (counted in `dropped`) when the inbox is full
        and its overflow is "wait" or "reject"; under "drop_oldest" the oldest waiting item
        makes room. `urgent`: write soon, without waiting for the interval. With `keep_all`,
        always True: the item is queued whatever the queue holds (see `room`)."""
        self.stats.offered += 1
        if self._keep_all:
            self._inbox.send_nowait(item)  # unbounded: never raises WouldBlock
            self._poke(urgent)
            return True
        try:
            if self.queued() >= self._inbox.capacity:  # a failed batch kept counts too
                raise trio.WouldBlock
            self._inbox.send_nowait(item)
        except trio.WouldBlock:
            if self._inbox.overflow != "drop_oldest" or not self._inbox.depth():
                self.stats.dropped += 1
                return False
            self._inbox.drop_oldest()
            self.stats.dropped += 1
            self._inbox.send_nowait(item)
        self._poke(urgent)
        return True

    def _poke(self, urgent: bool) -> None:
        """An item was queued: wake the loop if a batch is due now."""
        if urgent:
            self._urgent = True
        if self._urgent or self._inbox.depth() + len(self._buffer) >= self._max_batch:
            self._due.set()

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
        self._poke(False)

    def has_room(self) -> bool:
        """Fewer than `inbox_capacity` items are waiting to be written."""
        return self.queued() < self._inbox.capacity

    async def room(self, within_s: float = 30.0) -> None:
        """Admission for `keep_all` writers: return once fewer than `inbox_capacity` items
        are queued. A full queue makes the caller wait (overflow "wait"), at most `within_s`
        (the writer cannot write: its store is down), or raises `InboxFull` at once
        ("reject"); either way the caller is answered 503 with Retry-After, not left hanging."""
        if self.has_room():
            return
        if self._inbox.overflow == "wait":
            with trio.move_on_after(within_s):
                while not self.has_room():
                    await self._drained.wait()
                return
        self._inbox.rejected += 1
        raise InboxFull(self.name, self._inbox.capacity)

    # -- the admin tree -----------------------------------------------------------------

    def queued(self) -> int:
        """Items not yet written: in the inbox, received and waiting, or being written."""
        return self._inbox.depth() + len(self._buffer) + self._writing

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
            "keep_all": self._keep_all,
            "inbox": self._inbox.statistics(),
        }

    # -- the actor ----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        interval = self._flush_interval_s
        tick = trio.current_time() + interval
        try:
            while True:
                if not self._buffer:  # idle: wait for an item, without a timer
                    # Not `self._buffer.append(await ...)`: that binds the list before the
                    # wait, and a flush meanwhile replaces it (the item was lost).
                    item = await self._inbox.receive()
                    self._buffer.append(item)
                # Then more items gather in the inbox until the interval's tick or until a
                # batch is due (`_poke`); the flush takes them all. Ticks every interval from
                # the last flush, as if an idle writer flushed nothing at each.
                if not self._urgent and self._inbox.depth() + len(self._buffer) < self._max_batch:
                    now = trio.current_time()
                    if tick <= now:
                        tick += ((now - tick) // interval + 1) * interval
                    with trio.CancelScope(deadline=tick):
                        await self._due.wait()
                self._due = trio.Event()
                self._urgent = False
                if not await flush_shielded(self.flush, self._flush_limit_s):
                    log.error(
                        "%s: a write took over %s s; its batch is retried",
                        self.name,
                        self._flush_limit_s,
                    )
                if self._retry:  # failed: try again after an interval, not in a loop
                    await trio.sleep(self._flush_interval_s)
                tick = trio.current_time() + interval
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
            while self._inbox.in_transit():  # handed to the loop, not yet in the buffer
                await trio.lowlevel.checkpoint()
            while True:
                self._take_waiting(urgent_too=False)
                if not self._buffer or not await self._write_buffer():
                    return

    async def _write_buffer(self) -> bool:
        batch, retry = self._buffer, self._retry
        self._buffer, self._retry = [], False
        self._writing = len(batch)
        written = False
        rows: int | None = None
        began = trio.current_time()
        try:
            rows = await (self._rewrite if retry else self._write)(batch)
            written = True
            seconds = trio.current_time() - began
            self._inbox.handled(seconds, len(batch))  # each item waited for the whole write
        except Exception:
            log.exception("%s: writing %d items failed; retrying", self.name, len(batch))
        finally:
            self._writing = 0
            if not written:  # failed, or cut off by the limit: outcome unknown
                self.stats.flush_failures += 1
                self._buffer = batch + self._buffer
                self._retry = True
        if written:
            self._drained.set()
            self._drained = trio.Event()
            self.stats.flushes += 1
            self.stats.written += len(batch) if rows is None else rows
        return written
