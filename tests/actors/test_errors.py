"""actors/errors.py: one Redis-unavailable class, mapped in one place."""

from __future__ import annotations

import coredis.exceptions
import pytest
import trio
import trio.testing

from actors.errors import ActorBroken, RedisUnavailable, redis_call


@pytest.mark.parametrize(
    "failure",
    [OSError("refused"), TimeoutError(), coredis.exceptions.ConnectionError("reset")],
)
async def test_redis_and_network_failures_are_redis_unavailable(failure: Exception) -> None:
    with pytest.raises(RedisUnavailable) as raised, redis_call(1.0):
        raise failure
    assert raised.value.__cause__ is failure
    assert isinstance(raised.value, ActorBroken)


async def test_a_slow_answer_is_redis_unavailable(autojump_clock: trio.abc.Clock) -> None:
    with pytest.raises(RedisUnavailable, match="within 0.5 s"), redis_call(0.5):
        await trio.sleep(1)


async def test_bugs_and_outside_cancellation_pass_through() -> None:
    with pytest.raises(KeyError), redis_call(1.0):
        raise KeyError("bug")
    with trio.CancelScope() as outside:
        outside.cancel()
        with redis_call(1.0):
            await trio.sleep(1)
    assert outside.cancelled_caught
