"""The accountant: reservations against the balance, batched flushes driven by the clock,
the final flush on stop, and a retried flush that never charges twice."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

from actors.accountant import Accountant, InsufficientCredits, usage_charge
from protocol.billing import TOPUP
from storage.ledger import LedgerRepository, UsageCharge
from storage.open import Storage
from tests.waiting import wait_until


def charge(org_id: str, micros: int) -> UsageCharge:
    return usage_charge(
        org_id=org_id,
        key_id="key_1",
        model="m",
        request_id="req_1",
        micros=micros,
        description="chat",
        created_at=1_000_000,
    )


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
        await nursery.start(acc.run)
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
        await nursery.start(acc.run)
        acc.settle(await acc.reserve(org, 1), charge(org, 1))
        acc.settle(await acc.reserve(org, 1), charge(org, 1))
        await wait_until(lambda: acc.stats.rows_written >= 2)
        nursery.cancel_scope.cancel()
    assert await storage.ledger.sum_rows(org) == 998


async def test_stopping_writes_what_is_queued(storage: Storage) -> None:
    org = await funded(storage, 1_000)
    acc = Accountant(storage.ledger, storage.orgs, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(acc.run)
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


async def test_credit_is_seen_by_the_next_reservation(storage: Storage) -> None:
    org = await funded(storage, 0)
    acc = Accountant(storage.ledger, storage.orgs, balance_ttl_s=3600)
    with pytest.raises(InsufficientCredits):
        await acc.reserve(org, 1)
    txn = await acc.credit(org, TOPUP, 5_000_000, "top-up")
    assert txn.balance_after_micros == 5_000_000
    assert (await acc.reserve(org, 1)).micros == 1
