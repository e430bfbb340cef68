"""Auto-replenish never drains a card: it fires when the balance crosses the threshold (or
when it is switched on below it), not on every flush while below, and at most
`max_auto_topups_per_day` times per organization and UTC day, counted in the database (exact
across instances); the refused one writes `billing.auto_topup_limited` once."""

from __future__ import annotations

import logging

import pytest
import trio

from actors.accountant import Accountant
from actors.auto_replenish import AutoReplenish
from actors.settings import ActorSettings
from protocol.billing import ADJUSTMENT, TOPUP
from services.payments import TestPaymentProcessor
from storage.open import Storage
from tests.actors.test_accountant import funded, rep, spend, start
from tests.waiting import wait_until, wait_until_async


async def limited_events(storage: Storage, org: str) -> list[dict[str, object]]:
    events = await storage.events.list_for_org(org, limit=100)
    return [e.data for e in events if e.type == "billing.auto_topup_limited"]


async def any_limited(storage: Storage, org: str) -> bool:
    return bool(await limited_events(storage, org))


async def replenishing(
    storage: Storage,
    balance: int,
    *,
    amount: int = 20_000_000,
    threshold: int = 5_000_000,
) -> str:
    """An organization funded with `balance` µ$, auto-replenish on (stored directly: the API
    would refuse some of the settings the tests need)."""
    org = await funded(storage, balance)
    await storage.ledger.update_settings(
        org,
        {
            "auto_replenish": True,
            "replenish_amount_micros": amount,
            "replenish_threshold_micros": threshold,
        },
    )
    return org


def accountant(storage: Storage, payments: TestPaymentProcessor, cap: int = 3) -> Accountant:
    return Accountant(
        storage.ledger, storage.orgs, payments, flush_interval_s=3600, max_auto_topups_per_day=cap
    )


async def test_flushes_below_a_threshold_no_top_up_can_reach_charge_once(
    storage: Storage,
) -> None:
    # A threshold far above balance + amount (the API refuses it now).
    org = await replenishing(storage, 6_000_000, amount=5_000_000, threshold=1_000_000_000_000_000)
    payments = TestPaymentProcessor()
    acc = accountant(storage, payments)
    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        await spend(acc, org, 5, 1)  # switched on below the threshold: one top-up
        await wait_until(lambda: rep(acc).stats.replenished == 1)
        for _ in range(3):
            await spend(acc, org, 5, 1)
            await wait_until(lambda: rep(acc).idle())
        nursery.cancel_scope.cancel()
    assert payments.attempts == 1


async def cross(acc: Accountant, storage: Storage, org: str, threshold: int) -> None:
    """Spend the balance down to 1 µ$ below the threshold (one flush)."""
    await wait_until(lambda: rep(acc).idle())
    balance = (await storage.ledger.account(org)).balance_micros
    await spend(acc, org, balance - threshold + 1, 1)


async def test_top_ups_stop_at_the_daily_cap_with_one_event(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.accountant")
    org = await replenishing(storage, 6_000_000)
    payments = TestPaymentProcessor()
    acc = accountant(storage, payments, cap=2)
    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        for n in (1, 2):
            await cross(acc, storage, org, 5_000_000)
            await wait_until(lambda n=n: rep(acc).stats.replenished == n)  # type: ignore[misc]
        await cross(acc, storage, org, 5_000_000)  # the third crossing of the day: refused
        await wait_until_async(lambda: any_limited(storage, org))
        for _ in range(3):
            await spend(acc, org, 5, 1)
            await wait_until(lambda: rep(acc).idle())
        nursery.cancel_scope.cancel()
    assert payments.attempts == 2
    [event] = await limited_events(storage, org)
    assert event["max_auto_topups_per_day"] == 2
    assert event["threshold_usd"] == 5.0 and event["amount_usd"] == 20.0
    # Logged once, with the event (not on every flush that finds the cap used up).
    assert rep(acc).stats.replenish_limited == 1
    [logged] = [r for r in caplog.records if "max_auto_topups_per_day" in r.getMessage()]
    assert org in logged.getMessage() and "billing.auto_topup_limited" in logged.getMessage()


async def test_two_instances_share_the_daily_cap(storage: Storage) -> None:
    org = await replenishing(storage, 6_000_000)
    payments = TestPaymentProcessor()
    a, b = accountant(storage, payments, cap=2), accountant(storage, payments, cap=2)
    async with trio.open_nursery() as nursery:
        await start(nursery, a)
        await start(nursery, b)
        for _ in range(4):  # four crossings, alternating instances, each also flushing
            for acc in (a, b):
                await cross(acc, storage, org, 5_000_000)
                await wait_until(lambda: rep(a).idle() and rep(b).idle())
        nursery.cancel_scope.cancel()
    assert payments.attempts == 2 and rep(a).stats.replenished + rep(b).stats.replenished == 2
    assert len(await limited_events(storage, org)) == 1


async def test_a_negative_adjustment_that_crosses_makes_a_top_up_due(storage: Storage) -> None:
    """Not only usage: any change that takes the balance across the threshold downwards (a
    training hold, an operator's negative adjustment) arms one top-up, started by the org's
    next usage flush; staying below afterwards arms nothing more."""
    org = await replenishing(storage, 30_000_000)
    payments = TestPaymentProcessor()
    acc = accountant(storage, payments)
    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        await spend(acc, org, 5, 1)  # well above the threshold: nothing due
        await wait_until(lambda: rep(acc).idle())
        assert payments.attempts == 0
        await storage.ledger.apply(org, ADJUSTMENT, -26_000_000, "correction")  # 4 USD left
        acc.refresh(org)
        await spend(acc, org, 5, 1)
        await wait_until(lambda: rep(acc).stats.replenished == 1)
        await storage.ledger.apply(org, ADJUSTMENT, -20_000_000, "correction")  # 24 → 4
        acc.refresh(org)
        await spend(acc, org, 5, 1)
        await wait_until(lambda: rep(acc).stats.replenished == 2)
        await storage.ledger.apply(org, ADJUSTMENT, -1_000_000, "correction")  # still below
        acc.refresh(org)
        for _ in range(3):
            await spend(acc, org, 5, 1)
            await wait_until(lambda: rep(acc).idle())
        nursery.cancel_scope.cancel()
    assert payments.attempts == 2


async def test_a_cap_of_zero_allows_no_automatic_top_up(storage: Storage) -> None:
    """`max_auto_topups_per_day = 0`: none at all (not one per day), and once an instance has
    found the cap used up it asks the database no more that day (no claim per flush)."""
    org = await replenishing(storage, 6_000_000)
    payments = TestPaymentProcessor()
    acc = accountant(storage, payments, cap=0)
    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        await cross(acc, storage, org, 5_000_000)
        await wait_until_async(lambda: any_limited(storage, org))
        await wait_until(lambda: rep(acc).idle())
        for _ in range(3):
            await spend(acc, org, 5, 1)
            assert not rep(acc).busy(org)  # no attempt started by that flush
        nursery.cancel_scope.cancel()
    assert payments.attempts == 0 and rep(acc).stats.replenish_limited == 1
    assert len(await limited_events(storage, org)) == 1


async def test_due_notes_are_deduped_per_org_and_the_oldest_dropped_when_full(
    storage: Storage,
) -> None:
    payments = TestPaymentProcessor()
    orgs = []
    for n in range(3):  # each switched on below its threshold: a top-up is due
        org = (await storage.orgs.create(f"org-{n}")).id
        await storage.ledger.apply(org, TOPUP, 1_000_000, "top-up")
        await storage.ledger.update_settings(
            org,
            {
                "auto_replenish": True,
                "replenish_amount_micros": 20_000_000,
                "replenish_threshold_micros": 5_000_000,
            },
        )
        orgs.append(org)
    replenisher = AutoReplenish(
        storage.ledger,
        payments,
        storage.ledger.apply,
        settings=ActorSettings(inbox_capacity=2, overflow="drop_oldest"),
    )
    for _ in range(5):
        replenisher.due(orgs[0])  # one usage flush after another, before the actor runs
    assert replenisher.inbox_depth() == 1 and replenisher.stats.deduped == 4
    replenisher.due(orgs[1])
    replenisher.due(orgs[2])  # full: the oldest note (orgs[0]) makes room
    assert not replenisher.busy(orgs[0]) and replenisher.busy(orgs[1])
    inbox = replenisher.statistics()["inbox"]
    assert isinstance(inbox, dict) and inbox["dropped"] == 1
    async with trio.open_nursery() as nursery:
        await nursery.start(replenisher.run)
        await wait_until(lambda: replenisher.stats.replenished == 2)
        await wait_until(replenisher.idle)
        nursery.cancel_scope.cancel()
    assert payments.attempts == 2  # orgs[1] and orgs[2], once each
    for org in orgs[1:]:
        account = await storage.ledger.account(org)
        assert account.balance_micros == 21_000_000 == await storage.ledger.sum_rows(org)


async def test_replenishing_runs_apart_from_the_accountant(storage: Storage) -> None:
    """The top-up runs in its own actor: with the accountant not running (flushes asked for
    explicitly), the replenisher alone charges and credits, and the accountant's view sees the
    credit at once."""
    org = await replenishing(storage, 6_000_000)
    payments = TestPaymentProcessor()
    acc = accountant(storage, payments)
    async with trio.open_nursery() as nursery:
        await nursery.start(rep(acc).run)
        await spend(acc, org, 1_000_001, 1)  # crosses the 5 USD threshold
        await wait_until(lambda: rep(acc).stats.replenished == 1)
        nursery.cancel_scope.cancel()
    assert payments.attempts == 1
    reservation = await acc.reserve(org, 24_999_999)  # 4.999999 + 20 USD, all of it
    assert reservation.micros == 24_999_999
