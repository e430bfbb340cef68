"""Completion events written with their charges (issue #20, item 10), on every backend: a usage
flush inserts the charges' events in its own transaction, so a billed request's event commits
with its usage row or neither does; a retry writes each once."""

from __future__ import annotations

import pytest

from protocol.ids import new_id
from protocol.timefmt import now_us
from storage.errors import UniqueViolation
from storage.events import NewEvent, new_event
from storage.ledger import UsageCharge
from storage.open import Storage


def billed(org_id: str, micros: int, *, event: bool = True, id: str | None = None) -> UsageCharge:
    request_id = new_id("req")
    return UsageCharge(
        id=id or new_id("txn"),
        org_id=org_id,
        key_id="key_1",
        model="sim-small",
        request_id=request_id,
        micros=micros,
        description="chat completion",
        created_at=now_us(),
        event=new_event(org_id, "completion.success", {"request_id": request_id})
        if event
        else None,
    )


async def stored(storage: Storage, org_id: str) -> tuple[list[str], list[str]]:
    """The org's usage rows (request ids, oldest first) and its events' request ids."""
    rows, _ = await storage.ledger.list(org_id, limit=100, offset=0)
    events = await storage.events.list_for_org(org_id, limit=100)
    return [r.request_id or "" for r in reversed(rows)], [e.data["request_id"] for e in events]


async def test_a_flush_writes_the_charges_events_with_their_rows(storage: Storage) -> None:
    org = await storage.orgs.create("acme")
    charges = [billed(org.id, 10), billed(org.id, 20, event=False), billed(org.id, 30)]
    await storage.ledger.settle(charges)
    rows, events = await stored(storage, org.id)
    assert rows == [c.request_id for c in charges]
    assert events == [charges[0].request_id, charges[2].request_id]  # in the batch's order
    (first, second) = await storage.events.list_for_org(org.id)
    assert first.type == "completion.success" and first.seq < second.seq
    assert charges[0].event is not None and first.id == charges[0].event.id


async def test_a_failed_usage_write_leaves_no_event_and_the_retry_writes_each_once(
    storage: Storage,
) -> None:
    org = await storage.orgs.create("acme")
    earlier = billed(org.id, 1)
    await storage.ledger.settle([earlier])
    # The second charge reuses a stored row's id: the usage insert violates the key.
    batch = [billed(org.id, 10), billed(org.id, 20, id=earlier.id)]
    with pytest.raises(UniqueViolation):
        await storage.ledger.settle(batch)
    assert await stored(storage, org.id) == ([earlier.request_id], [earlier.request_id])
    # The accountant's retry (outcome unknown): skips what is stored, writes the rest once.
    await storage.ledger.settle(batch, skip_stored=True)
    await storage.ledger.settle(batch, skip_stored=True)
    rows, events = await stored(storage, org.id)
    assert rows == [earlier.request_id, batch[0].request_id]
    assert events == [earlier.request_id, batch[0].request_id]
    assert await storage.ledger.sum_rows(org.id) == -11


async def test_a_failed_event_insert_leaves_no_usage_row(storage: Storage) -> None:
    org = await storage.orgs.create("acme")
    taken = new_event(org.id, "completion.success", {"request_id": "req_taken"})
    await storage.events.write_batch([taken])
    charge = billed(org.id, 10)
    assert charge.event is not None
    e = charge.event
    charge.event = NewEvent(taken.id, e.org_id, e.type, e.data, e.created_at)  # a clash
    with pytest.raises(UniqueViolation):
        await storage.ledger.settle([charge])
    assert await stored(storage, org.id) == ([], ["req_taken"])
    assert (await storage.ledger.account(org.id)).balance_micros == 0
    charge.event = e
    await storage.ledger.settle([charge], skip_stored=True)
    assert await stored(storage, org.id) == ([charge.request_id], ["req_taken", charge.request_id])
