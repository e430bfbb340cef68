"""The mirror actor: `offer` never waits and drops (counting) past the inbox's capacity; jobs
run on a bounded number of workers, so a slow shadow delays nothing beyond that bound; each
call leaves a row (none for a skipped job); a failing shadow call is that job's alone."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import trio
import trio.testing

from actors.batch_writer import BatchWriter
from actors.mirror import Mirror
from actors.supervisor import Supervisor
from protocol.secretbox import MIRROR_ANSWERS, SecretBox
from services.mirror import SKIPPED, MirrorJob, ShadowResult
from storage.mirror_results import MirrorResult


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def _job(shadow: str, n: int = 0) -> MirrorJob:
    return MirrorJob(
        org_id="org_1",
        key_id=None,
        request_id=f"req_{n}",
        route="chat",
        model="small",
        shadow=shadow,
        billed=False,
        body=b"{}",
        primary_latency_ms=1.0,
        primary_prompt_tokens=1,
        primary_completion_tokens=1,
        primary_cost_usd=0.0,
        primary_answer=None,
    )


class _Shadows:
    """Shadow calls by name: "slow" takes 10 s, "fast" 0.01 s, "skip" is skipped, "boom"
    raises. Records when each call ended (Trio's clock)."""

    def __init__(self) -> None:
        self.ended: dict[str, float] = {}
        self.started = 0
        self.calls = 0
        self._changed = trio.Event()

    async def until(self, done: Callable[[], bool], limit_s: float) -> None:
        """Wait (Trio's clock) until `done()` holds after a call ended; fail past `limit_s`."""
        with trio.fail_after(limit_s):
            while not done():
                await self._changed.wait()

    def _end(self) -> None:
        self.calls += 1
        self._changed.set()
        self._changed = trio.Event()

    async def __call__(self, job: MirrorJob) -> ShadowResult:
        self.started += 1
        try:
            if job.shadow == "boom":
                raise RuntimeError("a bug in the shadow call")
            if job.shadow == "skip":
                return ShadowResult(SKIPPED)
            await trio.sleep(10.0 if job.shadow == "slow" else 0.01)
            self.ended[job.request_id] = trio.current_time()
            return ShadowResult("ok", latency_ms=1.0, answer=b"{}")
        finally:
            self._end()


def _writer(rows: list[MirrorResult]) -> BatchWriter[MirrorResult]:
    async def write(batch: list[MirrorResult]) -> None:
        rows.extend(batch)

    return BatchWriter("mirror-results", write, flush_interval_s=0.01)


def _box() -> SecretBox:
    return SecretBox.for_purpose(os.urandom(32), MIRROR_ANSWERS)


async def test_offers_past_the_capacity_are_dropped_and_counted_without_waiting() -> None:
    shadows = _Shadows()
    mirror = Mirror(shadows, _writer([]), _box(), capacity=4, workers=1)
    # Not running: nothing takes jobs, so the inbox fills. Offer is synchronous: it cannot
    # wait, and it never raises.
    taken = [mirror.offer(_job("fast", n)) for n in range(10)]
    assert taken == [True] * 4 + [False] * 6
    assert (mirror.offered, mirror.dropped, mirror.inbox_depth()) == (10, 6, 4)


async def test_a_slow_shadow_delays_nothing_beyond_the_worker_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shadows = _Shadows()
    rows: list[MirrorResult] = []
    writer = _writer(rows)
    mirror = Mirror(shadows, writer, _box(), capacity=64, workers=3)
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor()
        await nursery.start(supervisor.run)
        await supervisor.start(writer)
        await supervisor.start(mirror)
        start = trio.current_time()
        # Two slow calls hold two of the three workers; the fast ones behind them go on the
        # third, each at once.
        for n in range(2):
            assert mirror.offer(_job("slow", n))
        for n in range(2, 6):
            assert mirror.offer(_job("fast", n))
        await shadows.until(lambda: len(shadows.ended) == 4, limit_s=1.0)
        assert max(shadows.ended.values()) - start < 0.1
        assert mirror.in_flight == 2
        # A third slow call takes the last worker: now, and only now, a fast one waits for
        # the first slow call to end (the bound).
        assert mirror.offer(_job("slow", 6))
        await trio.sleep(0.05)
        assert mirror.offer(_job("fast", 7))
        await shadows.until(lambda: "req_7" in shadows.ended, limit_s=20.0)
        assert shadows.ended["req_7"] == pytest.approx(start + 10.0 + 0.01, abs=0.01)
        assert mirror.in_flight == 1  # the third slow call, started 0.05 s after the others
        await writer.flush()
        assert len(rows) == 7
        nursery.cancel_scope.cancel()


async def test_a_failing_call_is_its_jobs_alone_and_a_skipped_job_leaves_no_row(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shadows = _Shadows()
    rows: list[MirrorResult] = []
    writer = _writer(rows)
    mirror = Mirror(shadows, writer, _box(), capacity=16, workers=1)
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor()
        await nursery.start(supervisor.run)
        await supervisor.start(writer)
        await supervisor.start(mirror)
        for n, shadow in enumerate(["boom", "skip", "fast", "boom", "fast"]):
            assert mirror.offer(_job(shadow, n))
        await shadows.until(lambda: shadows.calls == 5, limit_s=5.0)
        await trio.testing.wait_all_tasks_blocked()  # the workers counted their last call
        await writer.flush()
        assert mirror.calls == {
            ("small", "boom", "error"): 2,
            ("small", "skip", SKIPPED): 1,
            ("small", "fast", "ok"): 2,
        }
        assert sorted(r.outcome for r in rows) == ["error", "error", "ok", "ok"]
        assert supervisor.snapshot().children[1].restarts == 0  # the actor never crashed
        nursery.cancel_scope.cancel()


async def test_rows_dropped_by_a_full_writer_are_counted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from actors.settings import ActorSettings

    shadows = _Shadows()
    written: list[MirrorResult] = []

    async def write(batch: list[MirrorResult]) -> None:
        written.extend(batch)

    # The writer is not running: it holds 2 rows, the rest are refused.
    writer = BatchWriter("w", write, settings=ActorSettings(inbox_capacity=2))
    mirror = Mirror(shadows, writer, _box(), capacity=16, workers=2)
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor()
        await nursery.start(supervisor.run)
        await supervisor.start(mirror)
        for n in range(5):
            mirror.offer(_job("fast", n))
        await shadows.until(lambda: shadows.calls == 5, limit_s=5.0)
        await trio.testing.wait_all_tasks_blocked()  # the workers counted their last call
        assert (mirror.results_dropped, writer.stats.dropped) == (3, 3)
        nursery.cancel_scope.cancel()
