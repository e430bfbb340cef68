"""The accountant: reservations against the balance, batched flushes driven by the clock,
the final flush on stop, and a retried flush that never charges twice."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.lowlevel
import trio.testing

from actors.accountant import Accountant, BudgetExceeded, InsufficientCredits
from actors.auto_replenish import AutoReplenish
from protocol.billing import TOPUP, KeyBudget
from services.payments import TestPaymentProcessor
from storage.database import Executor
from storage.ledger import LedgerRepository, Transaction, UsageCharge
from storage.open import Storage
from tests.charges import usage_charge
from tests.waiting import wait_until


async def start(nursery: trio.Nursery, acc: Accountant) -> None:
    """Start the accountant and, when it has one, its auto-replenish actor (the runtime starts
    both under its supervisor)."""
    await nursery.start(acc.run)
    if acc.replenisher is not None:
        await nursery.start(acc.replenisher.run)


def rep(acc: Accountant) -> AutoReplenish:
    assert acc.replenisher is not None
    return acc.replenisher


def charge(org_id: str, micros: int) -> UsageCharge:
    return usage_charge(org_id, micros, "key_1")


async def funded(storage: Storage, micros: int) -> str:
    org = await storage.orgs.create("acme")
    await storage.ledger.apply(org.id, TOPUP, micros, "top-up")
    return org.id


async def test_reservations_never_exceed_the_balance(storage: Storage) -> None:
    org = await funded(storage, 1_000)
    acc = Accountant(storage.ledger, storage.orgs)
    held = [await acc.reserve(org, 300) for _ in range(3)]
    with pytest.raises(InsufficientCredits) as refused:
        await acc.reserve(org, 300)
    assert (refused.value.available_micros, refused.value.needed_micros) == (100, 300)
    acc.settle(held[0], charge(org, 50))  # 250 released, 50 pending
    second = await acc.reserve(org, 300)
    acc.settle(held[1], None)
    acc.settle(held[1], None)  # settling twice is harmless
    assert (await acc.reserve(org, 300)).micros == 300
    acc.settle(second, None)
    assert acc.pending_micros(org) == 50
    assert await acc.plan_of(org) == "free"


async def test_settled_charges_are_written_on_the_flush_interval(storage: Storage) -> None:
    org = await funded(storage, 1_000)
    acc = Accountant(storage.ledger, storage.orgs, flush_interval_s=0.05)
    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        for micros in (10, 20, 30):
            acc.settle(await acc.reserve(org, micros), charge(org, micros))
        assert await storage.ledger.sum_rows(org) == 1_000  # not written yet
        await wait_until(lambda: acc.stats.flushes > 0)
        nursery.cancel_scope.cancel()
    assert acc.stats.flushes == 1 and acc.stats.rows_written == 3  # one transaction
    assert (await storage.ledger.account(org)).balance_micros == 940
    assert acc.pending_micros(org) == 0


async def test_a_full_batch_is_written_at_once(storage: Storage) -> None:
    org = await funded(storage, 1_000)
    acc = Accountant(storage.ledger, storage.orgs, flush_interval_s=3600, batch_size=2)
    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        acc.settle(await acc.reserve(org, 1), charge(org, 1))
        acc.settle(await acc.reserve(org, 1), charge(org, 1))
        await wait_until(lambda: acc.stats.rows_written >= 2)
        nursery.cancel_scope.cancel()
    assert await storage.ledger.sum_rows(org) == 998


async def test_stopping_writes_what_is_queued(storage: Storage) -> None:
    org = await funded(storage, 1_000)
    acc = Accountant(storage.ledger, storage.orgs, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        acc.settle(await acc.reserve(org, 5), charge(org, 5))
        nursery.cancel_scope.cancel()
    assert (await storage.ledger.account(org)).balance_micros == 995


class LostAcknowledgement(LedgerRepository):
    """Commits the first batch, then fails as if the connection dropped before the reply."""

    failed = False

    async def settle(
        self, charges: Sequence[UsageCharge], *, skip_stored: bool = False
    ) -> dict[str, int]:
        balances = await super().settle(charges, skip_stored=skip_stored)
        if not self.failed:
            self.failed = True
            raise OSError("connection lost")
        return balances


async def test_a_flush_whose_outcome_was_lost_is_retried_without_charging_twice(
    storage: Storage,
) -> None:
    org = await funded(storage, 1_000)
    acc = Accountant(LostAcknowledgement(storage.db), storage.orgs)
    acc.settle(await acc.reserve(org, 7), charge(org, 7))
    await acc.flush()
    assert acc.stats.flush_failures == 1
    acc.settle(await acc.reserve(org, 3), charge(org, 3))
    await acc.flush()
    assert (await storage.ledger.account(org)).balance_micros == 990
    assert await storage.ledger.sum_rows(org) == 990
    _, total = await storage.ledger.list(org, limit=10, offset=0)
    assert total == 3  # the top-up and two usage rows, not three


class SlowAcknowledgement(LedgerRepository):
    """Commits the first batch, then never answers (a server that stopped replying)."""

    stalled = False

    async def settle(
        self, charges: Sequence[UsageCharge], *, skip_stored: bool = False
    ) -> dict[str, int]:
        balances = await super().settle(charges, skip_stored=skip_stored)
        if not self.stalled:
            self.stalled = True
            await trio.sleep_forever()
        return balances


async def test_a_flush_cut_off_by_its_time_limit_is_retried_not_lost(storage: Storage) -> None:
    org = await funded(storage, 1_000)
    acc = Accountant(SlowAcknowledgement(storage.db), storage.orgs)
    acc.settle(await acc.reserve(org, 7), charge(org, 7))
    with trio.move_on_after(1):
        await acc.flush()
    assert acc.stats.flush_failures == 1
    await acc.flush()
    assert (await storage.ledger.account(org)).balance_micros == 993
    assert await storage.ledger.sum_rows(org) == 993
    _, total = await storage.ledger.list(org, limit=10, offset=0)
    assert total == 2  # the top-up and one usage row


async def test_the_balance_is_re_read_after_its_ttl(
    storage: Storage, mock_clock: trio.testing.MockClock
) -> None:
    org = await funded(storage, 100)
    acc = Accountant(storage.ledger, storage.orgs, balance_ttl_s=1.0)
    with pytest.raises(InsufficientCredits):
        await acc.reserve(org, 500)
    await storage.ledger.apply(org, TOPUP, 1_000, "top-up elsewhere")  # another instance
    with pytest.raises(InsufficientCredits):
        await acc.reserve(org, 500)  # still the cached balance
    mock_clock.jump(1.0)
    assert (await acc.reserve(org, 500)).micros == 500


async def test_a_running_accountant_re_reads_a_stale_balance_without_making_requests_wait(
    storage: Storage, mock_clock: trio.testing.MockClock
) -> None:
    org = await funded(storage, 100)
    acc = Accountant(storage.ledger, storage.orgs, balance_ttl_s=1.0, flush_interval_s=3600)

    def fits(micros: int) -> bool:
        try:
            held = acc.reserve_now(org, micros)
        except InsufficientCredits:
            return False
        assert held is not None  # never waits for I/O once the org was read
        acc.settle(held, None)
        return True

    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        assert acc.reserve_now(org, 50) is None  # never read yet: `reserve` does the I/O
        acc.settle(await acc.reserve(org, 50), None)
        await storage.ledger.apply(org, TOPUP, 1_000, "top-up elsewhere")  # another instance
        mock_clock.jump(1.0)
        assert not fits(500)  # stale: answered at once from memory, and a re-read starts
        assert acc.fresh_plan(org) == "free"
        mock_clock.rate = 1.0  # the re-read runs on database threads: wait in real time
        await wait_until(lambda: fits(500))
        acc.refresh(org)  # settings changed: the next request waits for the re-read
        assert acc.reserve_now(org, 1) is None and acc.fresh_plan(org) is None
        assert (await acc.reserve(org, 1)).micros == 1
        nursery.cancel_scope.cancel()


async def test_credit_is_seen_by_the_next_reservation(storage: Storage) -> None:
    org = await funded(storage, 0)
    acc = Accountant(storage.ledger, storage.orgs, balance_ttl_s=3600)
    with pytest.raises(InsufficientCredits):
        await acc.reserve(org, 1)
    txn = await acc.credit(org, TOPUP, 5_000_000, "top-up")
    assert txn.balance_after_micros == 5_000_000
    assert (await acc.reserve(org, 1)).micros == 1


async def test_a_key_budget_counts_spent_unwritten_and_held(storage: Storage) -> None:
    org = await funded(storage, 1_000_000)
    budget = KeyBudget("key_1", "jobs", daily_micros=100, monthly_micros=None)
    acc = Accountant(storage.ledger, storage.orgs)
    first = await acc.reserve(org, 60, budget)
    with pytest.raises(BudgetExceeded) as refused:
        await acc.reserve(org, 50, budget)  # 60 held + 50 > 100
    assert (refused.value.cap, refused.value.committed) == (100, 60)
    assert refused.value.period.label.startswith("d:")
    acc.settle(first, charge(org, 30))  # 30 settled, not written
    second = await acc.reserve(org, 50, budget)  # 30 + 50 <= 100
    with pytest.raises(BudgetExceeded):
        await acc.reserve(org, 21, budget)
    acc.settle(second, None)
    await acc.flush()  # now 30 is stored
    assert (await acc.reserve(org, 70, budget)).micros == 70
    other = KeyBudget("key_2", "other", daily_micros=None, monthly_micros=10)
    with pytest.raises(BudgetExceeded) as monthly:
        await acc.reserve(org, 11, other)
    assert monthly.value.period.label.startswith("m:")
    assert (await acc.reserve(org, 11)).micros == 11  # no budget: the balance alone decides


async def replenishing_org(storage: Storage, balance: int) -> str:
    org = await funded(storage, balance)
    await storage.ledger.update_settings(
        org,
        {
            "auto_replenish": True,
            "replenish_amount_micros": 20_000_000,
            "replenish_threshold_micros": 5_000_000,
        },
    )
    return org


async def spend(acc: Accountant, org: str, micros: int, times: int) -> None:
    for _ in range(times):
        acc.settle(await acc.reserve(org, micros), charge(org, micros))
    await acc.flush()


async def test_auto_replenish_tops_up_once_when_the_balance_falls_below(
    storage: Storage,
) -> None:
    org = await replenishing_org(storage, 6_000_000)
    payments = TestPaymentProcessor()
    acc = Accountant(storage.ledger, storage.orgs, payments, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        await spend(acc, org, 500_000, 1)  # 5.5 USD: above the threshold
        assert payments.attempts == 0
        # Many requests and flushes below the threshold, while the top-up runs: one charge.
        async with trio.open_nursery() as burst:
            for _ in range(5):
                burst.start_soon(spend, acc, org, 200_000, 2)
        await wait_until(lambda: rep(acc).stats.replenished == 1)
        await spend(acc, org, 100_000, 3)
        nursery.cancel_scope.cancel()
    assert payments.attempts == 1
    topups, _ = await storage.ledger.list(org, type=TOPUP, limit=10, offset=0)
    assert [(t.amount_micros, t.description) for t in topups[:1]] == [
        (20_000_000, "Auto top-up (visa 4242)")
    ]
    account = await storage.ledger.account(org)
    assert account.balance_micros == 6_000_000 - 500_000 - 2_000_000 - 300_000 + 20_000_000
    assert account.balance_micros == await storage.ledger.sum_rows(org)


async def test_a_declined_replenish_turns_auto_replenish_off_with_a_note_and_an_event(
    storage: Storage,
) -> None:
    org = await replenishing_org(storage, 5_100_000)
    payments = TestPaymentProcessor()
    payments.set_default_now(org, "pm_card_chargeDeclined")
    acc = Accountant(storage.ledger, storage.orgs, payments, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        await spend(acc, org, 200_000, 1)
        await wait_until(lambda: rep(acc).stats.replenish_failures == 1)
        for _ in range(5):
            await spend(acc, org, 10_000, 1)
            await trio.lowlevel.checkpoint()
        account = await storage.ledger.account(org)
        assert not account.auto_replenish
        assert (
            account.replenish_failure is not None and "card_declined" in account.replenish_failure
        )
        assert payments.attempts == 1  # off: no attempt per flush
        failed = await storage.events.list_for_org(org, limit=10)
        assert [e.type for e in failed if e.type == "billing.auto_replenish_failed"] == [
            "billing.auto_replenish_failed"
        ]
        # The org fixes its card and switches it on again: the failure is cleared, and the
        # balance (below the threshold) is topped up at once.
        payments.set_default_now(org, "pm_card_visa")
        await storage.ledger.update_settings(org, {"auto_replenish": True})
        acc.refresh(org)
        with trio.fail_after(10):
            while rep(acc).stats.replenished == 0:
                await spend(acc, org, 10_000, 1)
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert payments.attempts == 2
    assert (await storage.ledger.account(org)).replenish_failure is None
    assert await storage.ledger.replenish_state(org) == (None, None)


async def test_two_instances_replenish_once(storage: Storage) -> None:
    org = await replenishing_org(storage, 5_100_000)
    payments = TestPaymentProcessor()
    a = Accountant(storage.ledger, storage.orgs, payments, flush_interval_s=3600)
    b = Accountant(storage.ledger, storage.orgs, payments, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await start(nursery, a)
        await start(nursery, b)
        async with trio.open_nursery() as burst:
            burst.start_soon(spend, a, org, 200_000, 1)
            burst.start_soon(spend, b, org, 200_000, 1)
        await wait_until(lambda: rep(a).stats.replenished + rep(b).stats.replenished == 1)
        for acc in (a, b):
            await spend(acc, org, 10_000, 1)
        nursery.cancel_scope.cancel()
    assert payments.attempts == 1


class TopupsFail(LedgerRepository):
    """Usage is written; a top-up's credit fails (the database refused that one write)."""

    async def apply(
        self,
        org_id: str,
        type: str,
        micros: int,
        description: str,
        *,
        tx: Executor | None = None,
        id: str | None = None,
    ) -> Transaction:
        if id is not None:
            raise OSError("connection lost")
        return await super().apply(org_id, type, micros, description, tx=tx)


async def test_a_replenish_whose_credit_fails_is_refunded(storage: Storage) -> None:
    org = await replenishing_org(storage, 5_100_000)
    payments = TestPaymentProcessor()
    acc = Accountant(TopupsFail(storage.db), storage.orgs, payments, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await start(nursery, acc)
        await spend(acc, org, 200_000, 1)
        await wait_until(lambda: payments.charges and payments.charges[0].refunded)
        nursery.cancel_scope.cancel()
    assert payments.attempts == 1 and payments.net_micros(org) == 0
    assert await storage.ledger.sum_rows(org) == (await storage.ledger.account(org)).balance_micros


async def test_a_budget_refusal_tells_held_from_spent(storage: Storage) -> None:
    """The 402's message states what is held for requests in flight apart from what was spent
    (issue #20, item 13): BudgetExceeded carries both."""
    org = await funded(storage, 1_000_000)
    acc = Accountant(storage.ledger, storage.orgs)
    budget = KeyBudget("key_1", "capped", daily_micros=10, monthly_micros=None)
    acc.settle(await acc.reserve(org, 4, budget), charge(org, 3))  # 3 spent (not yet written)
    await acc.reserve(org, 5, budget)  # 5 held, in flight
    with pytest.raises(BudgetExceeded) as refused:
        await acc.reserve(org, 3, budget)
    assert (refused.value.cap, refused.value.committed, refused.value.held) == (10, 8, 5)
