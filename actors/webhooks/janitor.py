"""The webhook janitor: removes old attempts, finished deliveries and outbox events.

Every `interval_s` it purges what is older than the retention, a batch per statement so no
transaction grows with the backlog, until a batch comes back short. Several instances may run
it at once: deleting what another one already deleted is harmless.
"""

from __future__ import annotations

import trio

from actors.base import Actor
from actors.webhooks.clock import WallClock
from storage.webhooks import WebhookRepository

BATCH = 1000


class WebhookJanitor(Actor):
    def __init__(
        self,
        repo: WebhookRepository,
        *,
        retention_s: float,
        interval_s: float = 600.0,
        batch: int = BATCH,
        clock: WallClock | None = None,
        name: str = "webhook-janitor",
    ) -> None:
        self.name = name
        self._repo = repo
        self._retention_us = round(retention_s * 1_000_000)
        self._interval_s = interval_s
        self._batch = batch
        self._clock = clock or WallClock()
        self.purged = 0
        self.runs = 0

    def statistics(self) -> dict[str, object]:
        return {"purged": self.purged, "runs": self.runs}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.purge_once()
            await trio.sleep(self._interval_s)

    async def purge_once(self) -> int:
        """One round: batches until a short one; returns the rows deleted."""
        before = self._clock.now_us() - self._retention_us
        total = 0
        while True:
            deleted = await self._repo.purge(before, batch=self._batch)
            total += deleted
            self.purged += deleted
            if deleted < self._batch:
                break
        self.runs += 1
        return total
