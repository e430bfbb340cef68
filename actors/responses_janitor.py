"""The responses janitor: deletes stored responses whose 30 days are over (docs/responses.md).

Lookups already treat an expired row as absent (services/responses.py); this only frees
the space. Every `interval_s`, in batches until one comes back short. Several instances may run
it at once: a row is deleted by one statement, once.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from actors.base import Actor
from storage.responses import ResponseRepository

BATCH = 500


class ResponsesJanitor(Actor):
    def __init__(
        self,
        repo: ResponseRepository,
        clock: Callable[[], int],
        *,
        interval_s: float = 600.0,
        batch: int = BATCH,
        name: str = "responses-janitor",
    ) -> None:
        self.name = name
        self._repo = repo
        self._clock = clock  # wall microseconds
        self._interval_s = interval_s
        self._batch = batch
        self.expired = 0
        self.runs = 0

    def statistics(self) -> dict[str, object]:
        return {"expired": self.expired, "runs": self.runs}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.sweep_once()
            await trio.sleep(self._interval_s)

    async def sweep_once(self) -> int:
        """One round; how many rows went."""
        now = self._clock()
        removed = 0
        while True:
            n = await self._repo.remove_expired(now=now, limit=self._batch)
            removed += n
            if n < self._batch:
                break
        self.expired += removed
        self.runs += 1
        return removed
