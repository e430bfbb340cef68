"""The in-process rate limiter, with Trio's clock driven by the test."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors.ratelimit import LocalRateLimiter, open_rate_limiter
from actors.supervisor import Supervisor


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def _admit_until_refused(limiter: LocalRateLimiter, key: str, rpm: int) -> int:
    admitted = 0
    while (await limiter.admit(key, rpm)).allowed:
        admitted += 1
    return admitted


async def test_rpm_requests_at_once_then_a_refusal_then_one_per_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalRateLimiter()
    assert await _admit_until_refused(limiter, "k", 60) == 60
    refused = await limiter.admit("k", 60)
    assert (refused.allowed, refused.remaining) == (False, 0)
    assert refused.retry_after_s == pytest.approx(1.0)
    await trio.sleep(0.999)
    assert not (await limiter.admit("k", 60)).allowed
    await trio.sleep(0.001)
    assert (await limiter.admit("k", 60)).allowed
    assert not (await limiter.admit("k", 60)).allowed


async def test_a_steady_rate_of_rpm_is_always_admitted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalRateLimiter()
    await _admit_until_refused(limiter, "k", 60)  # start from an exhausted burst
    for _ in range(120):
        await trio.sleep(1.0)
        decision = await limiter.admit("k", 60)
        assert decision.allowed and decision.remaining == 0
    # From idle, one a second never dips into the burst either.
    for _ in range(120):
        await trio.sleep(1.0)
        assert (await limiter.admit("fresh", 60)).remaining == 59


async def test_keys_are_independent(autojump_clock: trio.testing.MockClock) -> None:
    limiter = LocalRateLimiter()
    assert await _admit_until_refused(limiter, "a", 3) == 3
    assert await _admit_until_refused(limiter, "b", 5) == 5
    assert limiter.statistics()["keys"] == 2


async def test_changing_rpm_applies_the_new_rate_to_the_same_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalRateLimiter()
    for _ in range(30):  # half the minute's burst used at 60 rpm: TAT is 30 s ahead
        assert (await limiter.admit("up", 60)).allowed
    # At 120 rpm the tolerance is 59.5 s and the interval 0.5 s: 60 more fit.
    assert await _admit_until_refused(limiter, "up", 120) == 60

    for _ in range(30):
        assert (await limiter.admit("down", 60)).allowed
    # At 10 rpm the tolerance is 54 s and the interval 6 s: 30 + 6k <= 54 for k = 0..4.
    assert await _admit_until_refused(limiter, "down", 10) == 5
    refused = await limiter.admit("down", 10)
    assert refused.retry_after_s == pytest.approx(6.0)


async def test_admission_is_not_a_checkpoint(autojump_clock: trio.testing.MockClock) -> None:
    limiter = LocalRateLimiter()
    with trio.testing.assert_no_checkpoints():
        await limiter.admit("k", 60)


async def test_housekeeping_retires_idle_keys_every_minute(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalRateLimiter()
    async with trio.open_nursery() as nursery:
        await nursery.start(limiter.run)
        await limiter.admit("short", 60)  # TAT at 1 s
        await trio.sleep(30.0)
        await limiter.admit("long", 1)  # TAT at 90 s
        assert await _admit_until_refused(limiter, "long", 1) == 0
        assert limiter.statistics() == {
            "keys": 2,
            "admitted": 2,
            "refused": 1,
            "unavailable": 0,
            "backend": "local",
        }
        await trio.sleep(30.5)  # the sweep at 60 s has run
        assert limiter.statistics()["keys"] == 1
        await trio.sleep(60.0)  # and the one at 120 s
        assert limiter.statistics()["keys"] == 0
        # A retired key starts afresh: the full burst is available again.
        assert (await limiter.admit("long", 1)).allowed
        nursery.cancel_scope.cancel()


async def test_runs_under_the_supervisor_and_shows_its_statistics(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalRateLimiter()
    supervisor = Supervisor()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        await supervisor.start(limiter)
        await limiter.admit("k", 60)
        (child,) = supervisor.snapshot().children
        assert (child.name, child.state) == ("rate-limiter", "running")
        assert child.statistics["admitted"] == 1
        nursery.cancel_scope.cancel()


async def test_open_rate_limiter_without_a_url_is_local() -> None:
    async with open_rate_limiter(None) as limiter:
        assert isinstance(limiter, LocalRateLimiter)
        assert limiter.statistics()["backend"] == "local"
        assert (await limiter.admit("k", 1)).allowed
