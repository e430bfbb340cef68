"""Balances and budgets shared through Redis by several accountants (instances), on both
database backends: exact across instances, settled at flush, stale instances' holds ignored.
Runs when GATEWAY_TEST_REDIS_URL is set; every test uses its own key prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator

import coredis
import pytest
import trio
import trio.testing

from actors.accountant import (
    Accountant,
    BudgetExceeded,
    InsufficientCredits,
    Reservation,
)
from actors.errors import RedisUnavailable
from actors.shared_holds import SharedHolds
from protocol.billing import TOPUP, KeyBudget
from protocol.ids import random_token
from protocol.timefmt import now_us
from storage.ledger import UsageCharge
from storage.open import Storage
from tests.backends import REDIS_URL
from tests.charges import usage_charge

pytestmark = pytest.mark.skipif(
    REDIS_URL is None, reason="GATEWAY_TEST_REDIS_URL is not set: no Redis to test against"
)


@pytest.fixture
async def clients() -> AsyncIterator[tuple[coredis.Redis[bytes], coredis.Redis[bytes], str]]:
    assert REDIS_URL is not None
    prefix = f"test:{random_token(12)}:"
    async with (
        coredis.Redis.from_url(REDIS_URL) as one,
        coredis.Redis.from_url(REDIS_URL) as two,
    ):
        yield one, two, prefix
        keys = [key async for key in one.scan_iter(match=f"{prefix}*")]
        if keys:
            await one.delete(keys)


def charge(org: str, micros: int, key: str | None = None) -> UsageCharge:
    return usage_charge(org, micros, key)


async def test_two_instances_never_hold_more_than_the_balance(
    storage: Storage, clients: tuple[coredis.Redis[bytes], coredis.Redis[bytes], str]
) -> None:
    one, two, prefix = clients
    org = (await storage.orgs.create("acme")).id
    await storage.ledger.apply(org, TOPUP, 1_000, "top-up")
    first, second = (
        Accountant(storage.ledger, storage.orgs, shared=SharedHolds(c, prefix=prefix))
        for c in (one, two)
    )
    held: list[tuple[Accountant, Reservation]] = []
    refused: list[InsufficientCredits] = []

    async def reserve(acc: Accountant) -> None:
        try:
            held.append((acc, await acc.reserve(org, 30)))
        except InsufficientCredits as exc:
            refused.append(exc)

    async with trio.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon(reserve, (first, second)[i % 2])
    assert len(held) == 33 and len(refused) == 67  # 33 x 30 = 990 <= 1000
    for acc, reservation in held:  # each cost 10 of the 30 it held
        acc.settle(reservation, charge(org, 10))
    with pytest.raises(InsufficientCredits):
        await first.reserve(org, 30)  # not flushed yet: the holds still count
    await first.flush()
    await second.flush()
    assert (await first.reserve(org, 600)).micros == 600  # 1000 - 330 = 670 left
    with pytest.raises(InsufficientCredits):
        await second.reserve(org, 71)
    assert (await storage.ledger.account(org)).balance_micros == 670
    assert await storage.ledger.sum_rows(org) == 670


async def test_a_key_budget_holds_across_instances(
    storage: Storage, clients: tuple[coredis.Redis[bytes], coredis.Redis[bytes], str]
) -> None:
    one, two, prefix = clients
    org = (await storage.orgs.create("acme")).id
    await storage.ledger.apply(org, TOPUP, 10**9, "top-up")
    budget = KeyBudget("key_1", "jobs", daily_micros=100, monthly_micros=None)
    first, second = (
        Accountant(storage.ledger, storage.orgs, shared=SharedHolds(c, prefix=prefix))
        for c in (one, two)
    )
    a = await first.reserve(org, 60, budget)
    with pytest.raises(BudgetExceeded) as refused:
        await second.reserve(org, 50, budget)
    assert (refused.value.cap, refused.value.committed, refused.value.held) == (100, 60, 60)
    first.settle(a, charge(org, 40, key="key_1"))
    await first.flush()
    assert (await second.reserve(org, 60, budget)).micros == 60  # 40 spent + 60
    with pytest.raises(BudgetExceeded):
        await first.reserve(org, 1, budget)
    assert (await storage.ledger.key_spend(["key_1"], now_us()))["key_1"] == (40, 40)


async def test_holds_of_an_instance_that_stopped_beating_do_not_count(
    storage: Storage, clients: tuple[coredis.Redis[bytes], coredis.Redis[bytes], str]
) -> None:
    one, two, prefix = clients
    org = (await storage.orgs.create("acme")).id
    await storage.ledger.apply(org, TOPUP, 100, "top-up")
    crashed = SharedHolds(one, prefix=prefix)
    dead = Accountant(storage.ledger, storage.orgs, shared=crashed)
    alive = Accountant(storage.ledger, storage.orgs, shared=SharedHolds(two, prefix=prefix))
    await dead.reserve(org, 100)  # held, then the instance "crashes" without settling
    with pytest.raises(InsufficientCredits):
        await alive.reserve(org, 1)
    # Its last heartbeat ages past LIVE_S (moved back in Redis rather than waiting).
    await one.zadd(f"{prefix}bill:instances", {crashed.instance: 0})
    assert (await alive.reserve(org, 100)).micros == 100


async def test_credits_reach_the_shared_balance(
    storage: Storage, clients: tuple[coredis.Redis[bytes], coredis.Redis[bytes], str]
) -> None:
    one, two, prefix = clients
    org = (await storage.orgs.create("acme")).id
    first, second = (
        Accountant(storage.ledger, storage.orgs, shared=SharedHolds(c, prefix=prefix))
        for c in (one, two)
    )
    with pytest.raises(InsufficientCredits):
        await second.reserve(org, 1)
    await first.credit(org, TOPUP, 500, "top-up")
    assert (await second.reserve(org, 500)).micros == 500


async def test_an_unreachable_redis_falls_back_to_this_instances_view(
    storage: Storage,
) -> None:
    org = (await storage.orgs.create("acme")).id
    await storage.ledger.apply(org, TOPUP, 100, "top-up")
    async with coredis.Redis.from_url("redis://127.0.0.1:1/0") as nowhere:
        shared = SharedHolds(nowhere, timeout_s=2.0)
        with pytest.raises(RedisUnavailable):
            await shared.heartbeat()
        acc = Accountant(storage.ledger, storage.orgs, shared=shared)
        held = await acc.reserve(org, 60)
        assert not held.shared and acc.stats.shared_unavailable == 1
        with pytest.raises(InsufficientCredits):
            await acc.reserve(org, 41)  # still exact on this instance
        acc.settle(held, charge(org, 60))
        await acc.flush()
    assert (await storage.ledger.account(org)).balance_micros == 40


async def test_a_charge_awaiting_its_request_keeps_its_redis_hold_until_written(
    storage: Storage,
    clients: tuple[coredis.Redis[bytes], coredis.Redis[bytes], str],
    mock_clock: trio.testing.MockClock,  # frozen: the charge never waits past its limit
) -> None:
    one, two, prefix = clients
    org = (await storage.orgs.create("acme")).id
    await storage.ledger.apply(org, TOPUP, 1_000, "top-up")
    first, second = (
        Accountant(storage.ledger, storage.orgs, shared=SharedHolds(c, prefix=prefix))
        for c in (one, two)
    )
    billed = charge(org, 100)
    first.settle(await first.reserve(org, 600), billed, awaits_event=True)
    await first.flush_due()  # the request has not ended: neither the row nor Redis changes
    assert await storage.ledger.sum_rows(org) == 1_000
    with pytest.raises(InsufficientCredits):
        await second.reserve(org, 500)  # the 600 still held in Redis
    assert first.request_ended(billed.request_id, None)
    await first.flush_due()
    assert await storage.ledger.sum_rows(org) == 900
    assert (await second.reserve(org, 800)).micros == 800  # settled there after the row
