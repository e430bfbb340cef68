"""Money is never dropped: the accountant's usage rows go through its `BatchWriter` with
`keep_all`, so a settled charge is always queued, however full the queue; the settings'
`inbox_capacity` holds back new reservations instead (they wait for the writer with overflow
"wait", or are refused with `InboxFull` under "reject"). Every charge ends as one ledger row
and the balance is exact, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio

from actors.accountant import Accountant
from actors.errors import InboxFull
from actors.settings import ActorSettings, Overflow
from protocol.billing import TOPUP
from storage.ledger import LedgerRepository, Settled, UsageCharge
from storage.open import Storage
from tests.charges import usage_charge
from tests.waiting import wait_until


class GatedWrites(LedgerRepository):
    """Usage writes wait for the test to open the gate (a database that stalls)."""

    gate = trio.Event()

    async def settle(self, charges: Sequence[UsageCharge], *, skip_stored: bool = False) -> Settled:
        await self.gate.wait()
        return await super().settle(charges, skip_stored=skip_stored)


async def funded(storage: Storage, micros: int) -> str:
    org = (await storage.orgs.create("acme")).id
    await storage.ledger.apply(org, TOPUP, micros, "top-up")
    return org


def accountant(storage: Storage, overflow: Overflow) -> tuple[Accountant, GatedWrites]:
    ledger = GatedWrites(storage.db)
    ledger.gate = trio.Event()
    settings = ActorSettings(inbox_capacity=2, overflow=overflow)
    return Accountant(ledger, storage.orgs, settings=settings, flush_interval_s=0.01), ledger


async def test_settlements_past_capacity_are_kept_and_reservations_wait(storage: Storage) -> None:
    org = await funded(storage, 1_000)
    acc, ledger = accountant(storage, "wait")
    async with trio.open_nursery() as nursery:
        await nursery.start(acc.run)
        held = [await acc.reserve(org, 10) for _ in range(5)]
        for n, reservation in enumerate(held, start=1):  # 5 charges, capacity 2: all kept
            acc.settle(reservation, usage_charge(org, n, "key_1"))
        assert acc.statistics()["queued"] == 5
        assert acc.reserve_now(org, 1) is None  # no room: not the no-I/O path
        admitted = trio.Event()

        async def reserve() -> None:
            acc.settle(await acc.reserve(org, 1), usage_charge(org, 1, "key_1"))
            admitted.set()

        nursery.start_soon(reserve)
        await trio.sleep(0.2)
        assert not admitted.is_set()  # waits for the writer, nothing refused
        ledger.gate.set()
        with trio.fail_after(5):
            await admitted.wait()
        nursery.cancel_scope.cancel()  # the stop writes the last charge
    rows = acc.statistics()["usage_rows"]
    assert isinstance(rows, dict) and rows["dropped"] == 0 and rows["written"] == 6
    assert (await storage.ledger.account(org)).balance_micros == 1_000 - 15 - 1
    assert await storage.ledger.sum_rows(org) == 1_000 - 16
    _, total = await storage.ledger.list(org, limit=20, offset=0)
    assert total == 1 + 6  # the top-up and a row per charge


async def test_a_full_queue_refuses_new_reservations_under_reject(storage: Storage) -> None:
    org = await funded(storage, 1_000)
    acc, ledger = accountant(storage, "reject")
    async with trio.open_nursery() as nursery:
        await nursery.start(acc.run)
        for micros in (3, 4):
            acc.settle(await acc.reserve(org, micros), usage_charge(org, micros))
        with pytest.raises(InboxFull):
            await acc.reserve(org, 1)  # refused (503 with Retry-After), the queue is kept
        ledger.gate.set()
        await wait_until(lambda: acc.statistics()["queued"] == 0)
        acc.settle(await acc.reserve(org, 1), usage_charge(org, 1))  # room again
        nursery.cancel_scope.cancel()
    assert (await storage.ledger.account(org)).balance_micros == 1_000 - 8
    assert await storage.ledger.sum_rows(org) == 1_000 - 8


async def test_stopping_writes_every_queued_charge_once_the_database_answers(
    storage: Storage,
) -> None:
    org = await funded(storage, 1_000)
    acc, ledger = accountant(storage, "wait")
    async with trio.open_nursery() as nursery:
        await nursery.start(acc.run)
        for micros in (1, 2):  # the queue's capacity
            acc.settle(await acc.reserve(org, micros), usage_charge(org, micros))
        nursery.cancel_scope.cancel()
        ledger.gate.set()  # the stop's flush is shielded: it waits for the write, bounded
    assert await storage.ledger.sum_rows(org) == 1_000 - 3
    assert (await storage.ledger.account(org)).balance_micros == 997
