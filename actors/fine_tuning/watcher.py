"""The job watcher: one actor per instance that follows every fine-tuning job it holds the
lease of, one task per job.

Every `scan_interval_s` (and at once when `wake()` is called: a job was just created or
cancelled here) it claims jobs that need a watcher and that nobody holds — a lease is the job
row's `lease_owner` and `lease_expires_at`, renewed every third of `lease_ttl_s` while the job
is watched — so each job has exactly one watcher across instances, and a job whose instance
stopped is taken over once its lease expires. Times are the WallClock's (Trio time anchored to
the wall clock), so a MockClock drives polls, backoff and leases alike.

`asleep_until` is the Trio time at which the next of its tasks wakes, when every one of them
sleeps (None while any works): tests jump a MockClock to it.
"""

from __future__ import annotations

import logging

import trio

from actors.base import Actor
from actors.fine_tuning.steps import Backoff, JobSteps, WatcherDeps
from protocol.ids import new_id
from storage.fine_tuning import JobRecord

log = logging.getLogger("gateway.fine_tuning")


class FineTuningWatcher(Actor):
    def __init__(self, deps: WatcherDeps) -> None:
        self.name = "fine_tuning_watcher"
        self.deps = deps
        self.owner = new_id("ftw")  # this instance, as lease owner
        self.clock = deps.clock
        self._watching: set[str] = set()
        self._wake = trio.Event()
        self._tasks = 0
        self._sleeping: dict[int, float] = {}
        self.steps_run = 0
        self.step_failures = 0

    def statistics(self) -> dict[str, object]:
        return {
            "watching": len(self._watching),
            "steps": self.steps_run,
            "step_failures": self.step_failures,
        }

    def wake(self) -> None:
        """Look for jobs now (one was created or cancelled on this instance)."""
        self._wake.set()

    @property
    def watching(self) -> frozenset[str]:
        return frozenset(self._watching)

    @property
    def asleep_until(self) -> float | None:
        if self._tasks == 0 or len(self._sleeping) < self._tasks:
            return None
        return min(self._sleeping.values())

    async def _sleep(self, seconds: float, *, wakeable: bool = False) -> None:
        token = id(trio.lowlevel.current_task())
        deadline = trio.current_time() + seconds
        self._sleeping[token] = deadline
        try:
            if wakeable:
                with trio.move_on_at(deadline):
                    await self._wake.wait()
            else:
                await trio.sleep_until(deadline)
        finally:
            del self._sleeping[token]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        config = self.deps.config
        async with trio.open_nursery() as nursery:
            self._tasks += 1
            try:
                task_status.started()
                while True:
                    self._wake = trio.Event()
                    free = config.max_watched - len(self._watching)
                    if free > 0:
                        for job in await self._claim(free):
                            self._watching.add(job.id)
                            nursery.start_soon(self._watch, job)
                    await self._sleep(config.scan_interval_s, wakeable=True)
            finally:
                self._tasks -= 1

    async def _claim(self, limit: int) -> list[JobRecord]:
        now = self.clock.now_us()
        until = now + round(self.deps.config.lease_ttl_s * 1_000_000)
        return await self.deps.repo.claim(self.owner, now=now, until=until, limit=limit)

    async def _watch(self, job: JobRecord) -> None:
        self._tasks += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_lease, job.id, nursery.cancel_scope)
                await self._follow(job)
                nursery.cancel_scope.cancel()
        finally:
            self._tasks -= 1
            self._watching.discard(job.id)
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                try:
                    await self.deps.repo.release(job.id, self.owner)
                except Exception as exc:  # the lease expires by itself
                    log.warning("job %s: releasing the lease failed: %s", job.id, exc)

    async def _follow(self, job: JobRecord) -> None:
        steps = JobSteps(self.deps, self.owner)
        backoff = Backoff(self.deps.config)
        current: JobRecord | None = job
        while current is not None and current.lease_owner == self.owner:
            try:
                delay = await steps.step(current, backoff)
                self.steps_run += 1
            except Exception as exc:  # storage down, a bug: never a tight loop, never a crash
                self.step_failures += 1
                log.exception("job %s: step failed: %s", current.id, exc)
                delay = backoff.next()
            if delay is None:
                return
            if delay > 0:
                await self._sleep(delay)
            try:
                current = await self.deps.repo.by_id(job.id)
            except Exception as exc:
                log.warning("job %s: reading it failed: %s", job.id, exc)
                await self._sleep(backoff.next())

    async def _keep_lease(self, job_id: str, scope: trio.CancelScope) -> None:
        self._tasks += 1
        try:
            ttl = self.deps.config.lease_ttl_s
            while True:
                await self._sleep(ttl / 3)
                until = self.clock.now_us() + round(ttl * 1_000_000)
                try:
                    held = await self.deps.repo.renew(job_id, self.owner, until=until)
                except Exception as exc:  # try again; the lease lasts a while yet
                    log.warning("job %s: renewing the lease failed: %s", job_id, exc)
                    continue
                if not held:
                    log.warning("job %s: lease lost; another instance watches it", job_id)
                    scope.cancel()
                    return
        finally:
            self._tasks -= 1
