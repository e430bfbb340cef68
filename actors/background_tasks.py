"""Work the request path hands off once the client has its answer (the plugins' `finished`
hooks: storing an answer in the response cache), so that no answer waits for it: a bounded
queue run by a few worker tasks. `spawn` never blocks: a full queue drops the job and counts
it (the cache then simply misses once more). A job that raises is counted and logged; it never
ends the actor or the instance. Jobs still queued when the instance stops are dropped (they are
optimisations, not records)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from actors.base import Actor

log = logging.getLogger(__name__)
Job = Callable[[], Awaitable[None]]


class BackgroundTasks(Actor):
    kind = "background"

    def __init__(self, name: str = "plugin-tasks", *, capacity: int = 1024, workers: int = 4):
        self.name = name
        self._send, self._receive = trio.open_memory_channel[Job](capacity)
        self._capacity = capacity
        self._workers = workers
        self.done = 0
        self.failed = 0
        self.dropped = 0

    def spawn(self, job: Job) -> bool:
        """Queue `job`; False (counted) when the queue is full."""
        try:
            self._send.send_nowait(job)
        except trio.WouldBlock:
            self.dropped += 1
            return False
        return True

    def inbox_depth(self) -> int:
        return self._receive.statistics().current_buffer_used

    def inbox_capacity(self) -> int | None:
        return self._capacity

    def statistics(self) -> dict[str, object]:
        return {"done": self.done, "failed": self.failed, "dropped": self.dropped}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(self._workers):
                nursery.start_soon(self._work)
            task_status.started()

    async def _work(self) -> None:
        async for job in self._receive:
            try:
                await job()
            except Exception:  # noqa: BLE001 - one job's failure is its own
                self.failed += 1
                log.warning("a background job failed", exc_info=True)
            else:
                self.done += 1
