"""A billed request's completion event is written with its charge (issue #20, item 10): the
charge waits in the accountant for its request's end, the event joins it, and one usage flush
writes both; a charge whose request does not end soon is written without it, and a retried
flush writes the event once. Time is the Trio clock (MockClock), never a real wait."""

from __future__ import annotations

from collections.abc import Sequence

import trio
import trio.testing

from actors.accountant import Accountant
from actors.awaiting_charges import LIMIT_S
from protocol.billing import TOPUP
from storage.events import NewEvent, new_event
from storage.ledger import LedgerRepository, Settled, UsageCharge
from storage.open import Storage
from tests.charges import usage_charge


async def funded(storage: Storage) -> str:
    org = await storage.orgs.create("acme")
    await storage.ledger.apply(org.id, TOPUP, 1_000, "top-up")
    return org.id


def success(charge: UsageCharge) -> NewEvent:
    return new_event(charge.org_id, "completion.success", {"request_id": charge.request_id})


async def stored(storage: Storage, org_id: str) -> tuple[int, list[str]]:
    """Usage rows written, and the request ids of the org's events."""
    _, rows = await storage.ledger.list(org_id, type="usage", limit=100, offset=0)
    events = await storage.events.list_for_org(org_id)
    return rows, [e.data["request_id"] for e in events]


async def test_a_charge_waits_for_its_request_and_is_written_with_its_event(
    storage: Storage, mock_clock: trio.testing.MockClock
) -> None:
    org = await funded(storage)
    acc = Accountant(storage.ledger, storage.orgs)
    charge = usage_charge(org, 7)
    acc.settle(await acc.reserve(org, 10), charge, awaits_event=True)
    mock_clock.jump(LIMIT_S / 2)
    await acc.flush_due()  # the loop's flush: the charge waits for its request
    assert await stored(storage, org) == (0, [])
    assert acc.pending_micros(org) == 7  # counted against the balance meanwhile
    assert acc.request_ended(charge.request_id, success(charge))
    await acc.flush_due()
    assert await stored(storage, org) == (1, [charge.request_id])
    assert acc.stats.flushes == 1  # one transaction for both
    assert acc.request_ended(charge.request_id, None) is False  # nothing waits any more


async def test_a_request_that_does_not_end_has_its_charge_written_alone(
    storage: Storage, mock_clock: trio.testing.MockClock
) -> None:
    org = await funded(storage)
    acc = Accountant(storage.ledger, storage.orgs)
    charge = usage_charge(org, 7)
    acc.settle(await acc.reserve(org, 10), charge, awaits_event=True)
    mock_clock.jump(LIMIT_S)
    await acc.flush_due()
    assert await stored(storage, org) == (1, [])
    # The event, when the request ends, is the caller's to write (the event writer).
    assert acc.request_ended(charge.request_id, success(charge)) is False


async def test_a_request_that_ended_without_an_event_releases_its_charge(
    storage: Storage,
) -> None:
    org = await funded(storage)
    acc = Accountant(storage.ledger, storage.orgs, flush_interval_s=3600)
    charge = usage_charge(org, 7)
    acc.settle(await acc.reserve(org, 10), charge, awaits_event=True)
    assert acc.statistics()["awaiting_request_end"] == 1
    assert acc.request_ended(charge.request_id, None)
    assert acc.statistics()["awaiting_request_end"] == 0
    await acc.flush()
    assert await stored(storage, org) == (1, [])


async def test_stopping_writes_charges_still_waiting(storage: Storage) -> None:
    org = await funded(storage)
    acc = Accountant(storage.ledger, storage.orgs, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(acc.run)
        acc.settle(await acc.reserve(org, 10), usage_charge(org, 7), awaits_event=True)
        nursery.cancel_scope.cancel()
    assert (await storage.ledger.account(org)).balance_micros == 993


class LostAcknowledgement(LedgerRepository):
    """Commits the first batch, then fails as if the connection dropped before the reply."""

    failed = False

    async def settle(self, charges: Sequence[UsageCharge], *, skip_stored: bool = False) -> Settled:
        settled = await super().settle(charges, skip_stored=skip_stored)
        if not self.failed:
            self.failed = True
            raise OSError("connection lost")
        return settled


async def test_a_retried_flush_writes_the_event_once(storage: Storage) -> None:
    org = await funded(storage)
    acc = Accountant(LostAcknowledgement(storage.db), storage.orgs)
    charge = usage_charge(org, 7)
    acc.settle(await acc.reserve(org, 10), charge, awaits_event=True)
    assert acc.request_ended(charge.request_id, success(charge))
    await acc.flush()
    assert acc.stats.flush_failures == 1
    await acc.flush()
    assert await stored(storage, org) == (1, [charge.request_id])
    assert await storage.ledger.sum_rows(org) == 993


async def test_only_charges_past_the_limit_stop_waiting(
    storage: Storage, mock_clock: trio.testing.MockClock
) -> None:
    org = await funded(storage)
    acc = Accountant(storage.ledger, storage.orgs)
    old, young = usage_charge(org, 1), usage_charge(org, 2)
    young.request_id = "req_young"
    acc.settle(await acc.reserve(org, 10), old, awaits_event=True)
    mock_clock.jump(LIMIT_S / 2)
    acc.settle(await acc.reserve(org, 10), young, awaits_event=True)
    mock_clock.jump(LIMIT_S / 2)
    await acc.flush_due()
    assert await storage.ledger.sum_rows(org) == 999  # the older one alone
    assert acc.request_ended("req_young", success(young))
    await acc.flush_due()
    assert await stored(storage, org) == (2, ["req_young"])
