"""The server's idle watch (gateway/server/idle.py): a waiting connection's scope is cancelled
once its time is past (at most a tick late), never after its wait was done, and a wait that
returned while a sweep cancelled it says so."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gateway.server.idle import MAX_TICK_S, IdleWatch


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def test_the_tick_is_a_quarter_of_the_shortest_timeout_at_most_a_second() -> None:
    assert IdleWatch(2.0).tick_s == 0.5
    assert IdleWatch(75.0).tick_s == MAX_TICK_S


async def test_a_wait_past_its_time_is_cancelled_within_a_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    watch = IdleWatch(2.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run)
        began = trio.current_time()
        with trio.CancelScope() as scope:
            watch.wait(scope, 2.0)
            await trio.sleep_forever()
        assert scope.cancelled_caught and watch.done(scope)
        assert 2.0 <= trio.current_time() - began <= 2.0 + watch.tick_s
        assert len(watch) == 0
        nursery.cancel_scope.cancel()


async def test_a_wait_done_in_time_is_never_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    watch = IdleWatch(1.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run)
        with trio.CancelScope() as scope:
            watch.wait(scope, 1.0)
            await trio.sleep(0.5)
            assert not watch.done(scope)
            await trio.sleep(10.0)  # many sweeps later, busy with a request
        assert not scope.cancelled_caught
        nursery.cancel_scope.cancel()


async def test_done_reports_a_sweep_that_came_after_the_wait_ended() -> None:
    watch = IdleWatch(1.0)
    scope = trio.CancelScope()  # the connection's, never entered here: nothing is raised
    watch.wait(scope, 0.0)  # already due
    watch.sweep()  # the sweep runs before the waiter resumed
    assert watch.done(scope)  # so the waiter closes instead of serving


async def test_cancel_all_cancels_the_waiting_only() -> None:
    watch = IdleWatch(10.0)
    waiting, busy = trio.CancelScope(), trio.CancelScope()
    watch.wait(waiting, 10.0)
    watch.wait(busy, 10.0)
    assert not watch.done(busy)
    watch.cancel_all()
    assert waiting.cancel_called and not busy.cancel_called
    assert len(watch) == 0
