"""The in-process rate limiter (a supervisor with an actor per active key), with Trio's clock
driven by the test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from actors.ratelimit import LocalRateLimiter, open_rate_limiter
from actors.settings import ActorSettings
from actors.supervisor import Supervisor


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.fixture
async def limiter(autojump_clock: trio.testing.MockClock) -> AsyncIterator[LocalRateLimiter]:
    limiter = LocalRateLimiter(ActorSettings(idle_retire_s=300.0))
    async with trio.open_nursery() as nursery:
        await nursery.start(limiter.run)
        yield limiter
        nursery.cancel_scope.cancel()


async def _admit_until_refused(limiter: LocalRateLimiter, key: str, rpm: int) -> int:
    admitted = 0
    while (await limiter.admit(key, rpm)).allowed:
        admitted += 1
    return admitted


async def test_rpm_requests_at_once_then_a_refusal_then_one_per_second(
    limiter: LocalRateLimiter, autojump_clock: trio.testing.MockClock
) -> None:
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
    limiter: LocalRateLimiter, autojump_clock: trio.testing.MockClock
) -> None:
    await _admit_until_refused(limiter, "k", 60)  # start from an exhausted burst
    for _ in range(120):
        await trio.sleep(1.0)
        decision = await limiter.admit("k", 60)
        assert decision.allowed and decision.remaining == 0
    # From idle, one a second never dips into the burst either.
    for _ in range(120):
        await trio.sleep(1.0)
        assert (await limiter.admit("fresh", 60)).remaining == 59


async def test_keys_are_independent(
    limiter: LocalRateLimiter, autojump_clock: trio.testing.MockClock
) -> None:
    assert await _admit_until_refused(limiter, "a", 3) == 3
    assert await _admit_until_refused(limiter, "b", 5) == 5
    assert limiter.statistics()["keys"] == 2


async def test_changing_rpm_applies_the_new_rate_to_the_same_state(
    limiter: LocalRateLimiter, autojump_clock: trio.testing.MockClock
) -> None:
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


async def test_admission_is_not_a_checkpoint(
    limiter: LocalRateLimiter, autojump_clock: trio.testing.MockClock
) -> None:
    await limiter.admit("k", 60)  # the key's actor exists: no spawn in what follows
    with trio.testing.assert_no_checkpoints():
        await limiter.admit("k", 60)


async def test_each_active_key_has_its_actor_retired_when_idle_and_its_tat_past(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = LocalRateLimiter(ActorSettings(idle_retire_s=10.0))
    async with trio.open_nursery() as nursery:
        await nursery.start(limiter.run)
        await limiter.admit("short", 60)  # TAT at 1 s
        await limiter.admit("long", 1)  # TAT at 60 s
        assert await _admit_until_refused(limiter, "long", 1) == 0
        children = {c.name: c for c in limiter.snapshot().children}
        assert set(children) == {"key:short", "key:long"}
        assert {c.kind for c in children.values()} == {"rate_limiter"}
        assert limiter.statistics()["keys"] == 2
        await trio.sleep(10.5)  # idle for idle_retire_s: "short" retires, "long"'s TAT is ahead
        assert [c.name for c in limiter.snapshot().children] == ["key:long"]
        await trio.sleep(50.0)  # its TAT (60 s) has passed too
        assert limiter.snapshot().children == ()
        assert limiter.statistics()["keys"] == 0
        # A retired key starts afresh: the full burst is available again.
        assert (await limiter.admit("long", 1)).allowed
        assert [c.name for c in limiter.snapshot().children] == ["key:long"]
        nursery.cancel_scope.cancel()


async def test_a_used_key_is_not_retired(autojump_clock: trio.testing.MockClock) -> None:
    limiter = LocalRateLimiter(ActorSettings(idle_retire_s=10.0))
    async with trio.open_nursery() as nursery:
        await nursery.start(limiter.run)
        for _ in range(5):
            await limiter.admit("busy", 600)
            await trio.sleep(8.0)
            assert limiter.statistics()["keys"] == 1
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
        assert (child.name, child.state) == ("rate-limiters", "running")
        assert child.statistics["admitted"] == 1
        (key,) = child.children
        assert (key.name, key.kind, key.messages_handled) == ("key:k", "rate_limiter", 1)
        nursery.cancel_scope.cancel()


async def test_open_rate_limiter_without_a_url_is_local() -> None:
    async with open_rate_limiter(None) as limiter, trio.open_nursery() as nursery:
        assert isinstance(limiter, LocalRateLimiter)
        await nursery.start(limiter.run)
        assert limiter.statistics()["backend"] == "local"
        assert (await limiter.admit("k", 1)).allowed
        nursery.cancel_scope.cancel()
