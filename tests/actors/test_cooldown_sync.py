"""The cooldown sharing actor (actors/cooldown_sync.py) on a real Redis: a trip written here
rests the same deployment of another instance's balancer; Redis down keeps the trip for the next
tick and changes nothing else."""

from __future__ import annotations

import secrets

import coredis
import pytest
import trio

from actors.cooldown_sync import CooldownSync
from actors.errors import RedisUnavailable
from services.routing.balancer import Balancer, Target
from services.routing.breaker import Breaker
from tests.backends import REDIS_URL

pytestmark = pytest.mark.skipif(REDIS_URL is None, reason="needs GATEWAY_TEST_REDIS_URL")


def _balancer() -> Balancer:
    def target(index: int, name: str) -> Target:
        breaker = Breaker(trip_failures=1, trip_window=1, cooldown_s=30.0, max_cooldown_s=60.0)
        return Target(index, name, breaker)

    return Balancer([target(0, "east/a"), target(1, "west/b")])


async def test_a_trip_here_rests_the_deployment_there() -> None:
    assert REDIS_URL is not None
    model = f"m-{secrets.token_hex(4)}"
    here, there = _balancer(), _balancer()
    async with coredis.Redis.from_url(REDIS_URL) as client:
        mine = CooldownSync(client, [(model, here)])
        theirs = CooldownSync(client, [(model, there)])
        west = here.targets[1]
        west.breaker.trip(trio.current_time())
        mine.tripped(west)
        await mine.tick()
        await theirs.tick()
        resting = there.targets[1].breaker
        assert resting.state == "open" and resting.open_until - trio.current_time() > 29
        assert there.targets[0].breaker.state == "closed"
        assert (mine.shared, theirs.honoured) == (1, 1)
        await mine.tick()  # reading its own trip back changes nothing
        assert mine.honoured == 0 and west.breaker.trips == 1


async def test_redis_down_keeps_the_trip_for_the_next_tick() -> None:
    balancer = _balancer()
    async with coredis.Redis.from_url("redis://127.0.0.1:1/0") as client:  # nothing listens
        sync = CooldownSync(client, [("m", balancer)], timeout_s=0.5)
        west = balancer.targets[1]
        west.breaker.trip(trio.current_time())
        sync.tripped(west)
        with pytest.raises(RedisUnavailable):
            await sync.tick()
        assert sync.shared == 0 and west.breaker.state == "open"
        assert sync.statistics()["pending"] == 1  # tried again at the next tick
