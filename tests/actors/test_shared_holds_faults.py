"""Redis outages and partitions under the shared holds, as drills: two accountants (instances)
share the database and reach one real Redis through a TCP forwarder the test cuts (reset and
refuse) or black-holes (bytes held, delivered late). After any of them, no key spends past its
budget, Redis's balance and key spend equal the database's once the instances reconciled,
and no hold is stuck or released twice. Runs when GATEWAY_TEST_REDIS_URL is set."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import coredis
import pytest
import trio

from actors.accountant import Accountant, BudgetExceeded, InsufficientCredits, Reservation
from actors.shared_holds import SharedHolds
from protocol.billing import TOPUP, KeyBudget, day_of
from protocol.ids import random_token
from protocol.timefmt import now_us
from storage.open import Storage
from tests.backends import REDIS_URL
from tests.charges import usage_charge
from tests.tcp_forwarder import Forwarder, forwarding
from tests.waiting import wait_until_async

pytestmark = pytest.mark.skipif(
    REDIS_URL is None, reason="GATEWAY_TEST_REDIS_URL is not set: no Redis to test against"
)

TIMEOUT_S = 0.3  # each Redis call's limit in these drills
HOLD, COST = 50, 40  # a request holds 50 µ$ and costs 40
CAP = 1_000  # the key's daily budget: $0.001
KEY = "key_drill"


@dataclass
class Drill:
    storage: Storage
    redis: coredis.Redis[bytes]  # direct, for looking at the state
    forwarder: Forwarder
    prefix: str
    org: str
    one: Accountant
    two: Accountant
    shared: tuple[SharedHolds, SharedHolds]

    def key(self, name: str) -> str:
        return f"{self.prefix}bill:{name}"

    async def value(self, name: str) -> int | None:
        raw = await self.redis.get(self.key(name))
        return None if raw is None else int(raw)

    async def holds(self, name: str) -> dict[str, int]:
        fields = await self.redis.hgetall(self.key(name))
        return {k.decode(): int(v) for k, v in fields.items()}

    async def stored_spend(self) -> int:
        return (await self.storage.ledger.key_spend([KEY], now_us()))[KEY][0]

    async def flush(self) -> None:
        await self.one.flush()
        await self.two.flush()


@asynccontextmanager
async def drill(storage: Storage, balance: int = 10**9) -> AsyncIterator[Drill]:
    assert REDIS_URL is not None
    url = urlsplit(REDIS_URL)
    prefix = f"test:{random_token(12)}:"
    org = (await storage.orgs.create("acme")).id
    await storage.ledger.apply(org, TOPUP, balance, "top-up")
    async with (
        coredis.Redis.from_url(REDIS_URL) as direct,
        forwarding(url.hostname or "127.0.0.1", url.port or 6379) as forwarder,
    ):
        through = f"redis://127.0.0.1:{forwarder.port}{url.path or '/0'}"
        async with (
            coredis.Redis.from_url(through) as c1,
            coredis.Redis.from_url(through) as c2,
        ):
            shared = (
                SharedHolds(c1, prefix=prefix, timeout_s=TIMEOUT_S),
                SharedHolds(c2, prefix=prefix, timeout_s=TIMEOUT_S),
            )
            # balance_ttl_s=0: during an outage each instance re-reads the database at every
            # reservation, so its own view is exact for sequential traffic (fail-open is
            # documented; these drills are about what happens once Redis is back).
            one, two = (
                Accountant(storage.ledger, storage.orgs, shared=s, balance_ttl_s=0.0)
                for s in shared
            )
            try:
                yield Drill(storage, direct, forwarder, prefix, org, one, two, shared)
            finally:
                keys = [key async for key in direct.scan_iter(match=f"{prefix}*")]
                if keys:
                    await direct.delete(keys)


BUDGET = KeyBudget(KEY, "drill", daily_micros=CAP, monthly_micros=None)


async def spend(acc: Accountant, org: str) -> bool:
    """One request on the key: reserve, charge, write. False when refused for the budget."""
    try:
        held = await acc.reserve(org, HOLD, BUDGET)
    except BudgetExceeded:
        return False
    acc.settle(held, usage_charge(org, COST, KEY))
    await acc.flush()
    return True


async def redis_agrees(d: Drill) -> None:
    """Redis's balance and the key's spend today equal the database's, no hold is left."""
    account = await d.storage.ledger.account(d.org)
    assert await d.value(f"bal:{d.org}") == account.balance_micros
    assert await d.value(f"spend:{KEY}:{day_of(now_us()).label}") == await d.stored_spend()
    assert sum((await d.holds(f"held:{d.org}")).values()) == 0
    assert sum((await d.holds(f"kheld:{KEY}")).values()) == 0


@pytest.mark.parametrize("fault", ["cut", "blackhole"])
async def test_spend_admitted_during_an_outage_reaches_redis_and_the_cap_holds(
    storage: Storage, fault: str
) -> None:
    async with drill(storage) as d:
        for i in range(8):  # 8 x 40 = 320 spent through Redis
            assert await spend((d.one, d.two)[i % 2], d.org)
        await redis_agrees(d)
        if fault == "cut":
            await d.forwarder.cut()
        else:
            d.forwarder.blackhole()
        for i in range(8):  # 320 more, each instance on its own view
            assert await spend((d.one, d.two)[i % 2], d.org)
        assert d.one.stats.shared_unavailable and d.two.stats.shared_unavailable
        if fault == "cut":
            await d.forwarder.restore()
        else:
            d.forwarder.heal()
        await d.flush()  # each instance reconciles before using Redis again
        await redis_agrees(d)  # right after recovery, not when a value expires
        assert await d.stored_spend() == 640

        admitted = 0
        for _ in range(20):  # 360 left under the cap: 7 more of 50 held / 40 spent fit
            admitted += await spend((d.one, d.two)[admitted % 2], d.org)
        assert admitted == 8  # 640 + 8 x 40 = 960; a 9th would hold 960 + 50 > 1000
        assert await d.stored_spend() == 960 <= CAP
        await redis_agrees(d)


async def test_a_burst_after_the_outage_cannot_pass_the_cap(storage: Storage) -> None:
    async with drill(storage) as d:
        for i in range(4):  # 160 spent through Redis
            assert await spend((d.one, d.two)[i % 2], d.org)
        await d.forwarder.cut()
        for i in range(8):  # 320 more while Redis is away
            assert await spend((d.one, d.two)[i % 2], d.org)
        await d.forwarder.restore()
        await d.flush()
        held: list[tuple[Accountant, Reservation]] = []

        async def one_request(acc: Accountant) -> None:
            try:
                held.append((acc, await acc.reserve(d.org, HOLD, BUDGET)))
            except BudgetExceeded:
                pass

        async with trio.open_nursery() as nursery:  # 100 at once over both instances
            for i in range(100):
                nursery.start_soon(one_request, (d.one, d.two)[i % 2])
        assert len(held) == (CAP - 480) // HOLD  # 10 holds of 50 fill the 520 left
        for acc, reservation in held:
            acc.settle(reservation, usage_charge(d.org, COST, KEY))
        await d.flush()
        assert await d.stored_spend() == 480 + 10 * COST <= CAP
        await redis_agrees(d)


async def test_a_reservation_that_runs_late_leaves_no_stuck_hold(storage: Storage) -> None:
    async with drill(storage) as d:
        assert await spend(d.one, d.org)  # connected, state read
        d.forwarder.blackhole()
        late = await d.one.reserve(d.org, HOLD, BUDGET)  # times out: held on its own view
        assert not late.shared
        d.forwarder.heal()  # the reservation script reaches Redis now, after its caller left

        async def ran_late() -> bool:
            return (await d.holds(f"kheld:{KEY}")).get(d.shared[0].instance) == HOLD

        await wait_until_async(ran_late)
        d.one.settle(late, usage_charge(d.org, COST, KEY))
        await d.flush()
        await redis_agrees(d)
        assert (await d.holds(f"held:{d.org}")).get(d.shared[0].instance, 0) == 0
        # ... and the next reservations through Redis count exactly what is held.
        again = await d.one.reserve(d.org, HOLD, BUDGET)
        assert again.shared
        assert await d.holds(f"kheld:{KEY}") == {d.shared[0].instance: HOLD}


async def test_a_settlement_that_runs_late_is_not_applied_twice(storage: Storage) -> None:
    async with drill(storage) as d:
        held = await d.one.reserve(d.org, HOLD, BUDGET)
        other = await d.two.reserve(d.org, HOLD, BUDGET)
        assert held.shared and other.shared
        d.one.settle(held, usage_charge(d.org, COST, KEY))
        d.forwarder.blackhole()
        await d.one.flush()  # written to the database; the Redis batch times out
        assert d.one.stats.flush_failures == 1
        d.forwarder.heal()  # ... and runs now, late
        stored = (await d.storage.ledger.account(d.org)).balance_micros

        async def ran_late() -> bool:
            return await d.value(f"bal:{d.org}") == stored

        await wait_until_async(ran_late)
        await d.one.flush()  # reconciles: the late batch must not be applied again
        d.two.settle(other, usage_charge(d.org, COST, KEY))
        await d.flush()
        await redis_agrees(d)
        assert await d.stored_spend() == 2 * COST


async def test_a_settlement_lost_in_a_partition_is_sent_again(storage: Storage) -> None:
    async with drill(storage) as d:
        held = await d.one.reserve(d.org, HOLD, BUDGET)
        d.one.settle(held, usage_charge(d.org, COST, KEY))
        d.forwarder.blackhole()
        await d.one.flush()  # times out; the connection is then reset: it never runs
        await d.forwarder.cut()
        await d.forwarder.restore()
        d.forwarder.heal()
        await d.one.flush()
        await redis_agrees(d)


async def test_dead_instances_fields_are_deleted(storage: Storage) -> None:
    async with drill(storage) as d:
        crashed = [SharedHolds(d.redis, prefix=d.prefix) for _ in range(5)]
        for shared in crashed:  # five restarts, each leaving a hold behind
            acc = Accountant(d.storage.ledger, d.storage.orgs, shared=shared)
            await acc.reserve(d.org, HOLD, BUDGET)
        assert len(await d.holds(f"held:{d.org}")) == 5
        for shared in crashed:  # their heartbeats age past LIVE_S (moved back in Redis)
            await d.redis.zadd(d.key("instances"), {shared.instance: 0})
        held = await d.one.reserve(d.org, HOLD, BUDGET)
        assert await d.holds(f"held:{d.org}") == {d.shared[0].instance: HOLD}
        assert await d.holds(f"kheld:{KEY}") == {d.shared[0].instance: HOLD}
        d.one.settle(held, None)  # released: the field goes, not left at zero
        await d.one.flush()
        assert await d.holds(f"held:{d.org}") == {}


async def test_an_instance_whose_heartbeat_lapsed_posts_its_holds_again(
    storage: Storage,
) -> None:
    async with drill(storage, balance=100) as d:
        mine = await d.one.reserve(d.org, 60)
        await d.redis.zadd(d.key("instances"), {d.shared[0].instance: 0})  # lapsed
        await d.two.reserve(d.org, 10)  # meets the dead field: deletes it
        assert set(await d.holds(f"held:{d.org}")) == {d.shared[1].instance}
        await d.shared[0].heartbeat()  # finds its beat lapsed: reconciles before holding
        assert not d.shared[0].trusted
        await d.one.flush()
        with pytest.raises(InsufficientCredits):
            await d.two.reserve(d.org, 31)  # 100 - 60 - 10 = 30: its hold was posted again
        assert await d.holds(f"held:{d.org}") == {
            d.shared[0].instance: 60,
            d.shared[1].instance: 10,
        }
        d.one.settle(mine, usage_charge(d.org, 60))
        await d.one.flush()
        assert await d.value(f"bal:{d.org}") == 40


async def test_after_redis_lost_its_data_holds_are_posted_again(storage: Storage) -> None:
    async with drill(storage, balance=100) as d:
        await d.one.reserve(d.org, 10)
        mine = await d.one.reserve(d.org, 50)
        assert mine.shared
        keys = [key async for key in d.redis.scan_iter(match=f"{d.prefix}*")]
        await d.redis.delete(keys)  # Redis restarted without its data
        assert not (await d.one.reserve(d.org, 1)).shared  # noticed: its own view meanwhile
        await d.one.flush()  # reconciles: its holds (10 + 50 + 1) are posted again
        assert (await d.holds(f"held:{d.org}")) == {d.shared[0].instance: 61}
        with pytest.raises(InsufficientCredits):
            await d.two.reserve(d.org, 40)  # the balance was read again: 100 - 61 = 39


async def test_a_request_admitted_during_the_outage_and_still_running_is_held_after_it(
    storage: Storage,
) -> None:
    async with drill(storage, balance=100) as d:
        await d.one.reserve(d.org, 10)  # connected
        await d.forwarder.cut()
        running = await d.one.reserve(d.org, 60)  # a long stream, admitted on its own view
        assert not running.shared
        await d.forwarder.restore()
        await d.one.flush()  # reconciles: both of its holds are posted
        assert await d.holds(f"held:{d.org}") == {d.shared[0].instance: 70}
        with pytest.raises(InsufficientCredits):
            await d.two.reserve(d.org, 31)  # 100 - 70
        d.one.settle(running, usage_charge(d.org, 60))
        await d.one.flush()
        assert await d.holds(f"held:{d.org}") == {d.shared[0].instance: 10}
        assert await d.value(f"bal:{d.org}") == 40


async def test_a_request_admitted_and_ended_during_the_outage_releases_nothing(
    storage: Storage,
) -> None:
    async with drill(storage, balance=100) as d:
        kept = await d.one.reserve(d.org, 10)
        await d.forwarder.cut()
        brief = await d.one.reserve(d.org, 60)
        d.one.settle(brief, usage_charge(d.org, 50))
        await d.one.flush()  # written; Redis still away
        await d.forwarder.restore()
        await d.one.flush()
        assert await d.holds(f"held:{d.org}") == {d.shared[0].instance: 10}
        assert await d.value(f"bal:{d.org}") == 50
        d.one.settle(kept, None)
        await d.one.flush()
        assert await d.holds(f"held:{d.org}") == {}
        assert await d.value(f"bal:{d.org}") == 50 == await d.storage.ledger.sum_rows(d.org)
