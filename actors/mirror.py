"""Traffic mirroring (docs/mirroring.md): the actor that makes shadow calls in the background,
and the one that keeps their results within the retention bound.

`Mirror.offer` is called on the request path once the primary answer has gone: it never
waits and never raises; when the bounded inbox is full the job is dropped and counted
(`dropped`), so a shadow that cannot keep up costs the clients nothing. `workers` tasks take
jobs from the inbox and make the calls concurrently, each through `shadow`, the callable the
gateway layer gives (gateway/mirror/shadow.py: resolve the shadow model, send, translate,
price, bill): this actor knows nothing of HTTP nor of the config. A slow shadow holds one
worker for as long as its call lasts (the provider's `read_timeout_s` at most); jobs behind
it are taken by the other workers, so it delays nothing beyond the worker bound. Each call's
row (services/mirror.py `result_row`, its answer sealed) goes to the results writer, a
`BatchWriter` (dropped and counted when that is full).

The inbox belongs to the instance: jobs queued while the actor restarts are still there.
A call in progress when the actor stops (or crashes) is abandoned without a row.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable

import trio

from actors.base import Actor
from actors.batch_writer import BatchWriter
from actors.inbox import Inbox
from actors.settings import ActorSettings
from protocol.secretbox import SecretBox
from protocol.timefmt import now_us
from services.mirror import SKIPPED, MirrorJob, ShadowResult, result_row
from storage.mirror_results import MirrorResult, MirrorResultRepository

log = logging.getLogger("gateway.mirror")

Shadow = Callable[[MirrorJob], Awaitable[ShadowResult]]

INBOX_CAPACITY = 256
WORKERS = 8


class Mirror(Actor):
    kind = "background"

    def __init__(
        self,
        shadow: Shadow,
        results: BatchWriter[MirrorResult],
        box: SecretBox,
        *,
        capacity: int = INBOX_CAPACITY,
        workers: int = WORKERS,
        clock: Callable[[], int] = now_us,
        name: str = "mirror",
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.name = name
        self._shadow = shadow
        self._results = results
        self._box = box  # MIRROR_ANSWERS under the master key
        self._clock = clock  # wall microseconds, for the rows' times
        self._workers = workers
        self._inbox: Inbox[MirrorJob] = Inbox(capacity, overflow="reject", name=name)
        self.offered = 0
        self.dropped = 0  # jobs refused: the inbox was full
        self.results_dropped = 0  # rows refused: the results writer was full
        self.in_flight = 0
        # (model, shadow, outcome) -> calls made since start (SKIPPED included: no row).
        self.calls: Counter[tuple[str, str, str]] = Counter()

    # -- the request path ----------------------------------------------------------------

    def offer(self, job: MirrorJob) -> bool:
        """Queue `job` without waiting; False (counted in `dropped`) when the inbox is full
        or closed. Never raises."""
        try:
            self.offered += 1
            self._inbox.send_nowait(job)
        except Exception:  # trio.WouldBlock (full), ClosedResourceError: dropped
            self.dropped += 1
            return False
        return True

    async def flush(self) -> None:
        """Write the rows of the calls ended so far (tools, tests, a drain)."""
        await self._results.flush()

    # -- the admin tree ------------------------------------------------------------------

    def inbox_depth(self) -> int:
        return self._inbox.depth()

    def inbox_capacity(self) -> int:
        return self._inbox.capacity

    def handling(self) -> tuple[int, float | None]:
        return self._inbox.handling()

    def statistics(self) -> dict[str, object]:
        return {
            "offered": self.offered,
            "dropped": self.dropped,
            "results_dropped": self.results_dropped,
            "in_flight": self.in_flight,
            "workers": self._workers,
            "calls": sum(self.calls.values()),
            "inbox": self._inbox.statistics(),
        }

    # -- the actor -----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as workers:
            for _ in range(self._workers):
                workers.start_soon(self._work)
            task_status.started()

    async def _work(self) -> None:
        while True:
            job = await self._inbox.receive()
            began = trio.current_time()
            await self._call(job)
            self._inbox.handled(trio.current_time() - began)

    async def _call(self, job: MirrorJob) -> None:
        """One job: the shadow call, its count, its row. An unexpected failure is the job's
        alone (logged, counted as "error"), never the other workers'."""
        self.in_flight += 1
        try:
            result = await self._shadow(job)
        except Exception:
            log.exception("mirror %s -> %s: the shadow call failed", job.model, job.shadow)
            result = ShadowResult("error")
        finally:
            self.in_flight -= 1
        self.calls[job.model, job.shadow, result.outcome] += 1
        if result.outcome == SKIPPED:
            return
        try:
            row = result_row(job, result, self._box, self._clock())
        except Exception:
            log.exception("mirror %s -> %s: its row could not be made", job.model, job.shadow)
            return
        if not self._results.offer(row):
            self.results_dropped += 1


def results_writer(
    repo: MirrorResultRepository,
    *,
    settings: ActorSettings | None = None,
    flush_interval_s: float = 1.0,
) -> BatchWriter[MirrorResult]:
    """The writer of the rows: a batch a second (they are for comparison, not money), a
    retried batch skipping the rows already stored."""

    async def write(batch: list[MirrorResult]) -> int:
        return await repo.write_batch(batch)

    async def rewrite(batch: list[MirrorResult]) -> int:
        return await repo.write_batch(batch, skip_stored=True)

    return BatchWriter(
        "mirror-results",
        write,
        rewrite=rewrite,
        settings=settings,
        flush_interval_s=flush_interval_s,
    )


class MirrorRetention(Actor):
    """Deletes mirror results past the retention bound every `interval_s`: rows older than
    `max_age_s`, and per (model, shadow) those past its `max_rows_per_pair` most recent.
    Several instances may run it at once."""

    def __init__(
        self,
        repo: MirrorResultRepository,
        *,
        max_age_s: float,
        max_rows_per_pair: int,
        interval_s: float = 600.0,
        clock: Callable[[], int] = now_us,
        name: str = "mirror-retention",
    ) -> None:
        self.name = name
        self._repo = repo
        self._max_age_us = int(max_age_s * 1_000_000)
        self._max_rows = max_rows_per_pair
        self._interval_s = interval_s
        self._clock = clock
        self.removed = 0
        self.runs = 0

    def statistics(self) -> dict[str, object]:
        return {"removed": self.removed, "runs": self.runs}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.sweep_once()
            await trio.sleep(self._interval_s)

    async def sweep_once(self) -> int:
        """One round; how many rows went."""
        removed = await self._repo.prune(
            older_than_us=self._clock() - self._max_age_us, max_rows_per_pair=self._max_rows
        )
        self.removed += removed
        self.runs += 1
        return removed
