"""The event writer: hot-path events written in batches (one transaction per flush), a full
buffer that drops and counts instead of blocking, the final flush on stop, and a retried flush
that never writes an event twice. On both backends."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from actors.event_writer import EventWriter
from storage.events import EventRepository, NewEvent, new_event
from storage.open import Storage
from tests.waiting import wait_until


async def org(storage: Storage) -> str:
    return (await storage.orgs.create("acme")).id


def event(org_id: str, n: int) -> NewEvent:
    return new_event(org_id, "completion.success", {"n": n, "nested": {"ok": True}})


async def test_events_are_written_in_one_transaction_per_flush_in_order(storage: Storage) -> None:
    org_id = await org(storage)
    writer = EventWriter(storage.events, flush_interval_s=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for n in range(30):
            assert writer.offer(event(org_id, n))
        assert await storage.events.list_for_org(org_id) == []  # not written yet
        await wait_until(lambda: writer.stats.written == 30)
        nursery.cancel_scope.cancel()
    assert writer.stats.flushes == 1  # 30 events, one transaction
    stored = await storage.events.list_for_org(org_id)
    assert [e.data["n"] for e in stored] == list(range(30))
    assert stored[0].type == "completion.success" and stored[0].data["nested"] == {"ok": True}
    assert writer.statistics()["written"] == 30 and writer.statistics()["dropped"] == 0


async def test_a_full_batch_is_written_without_waiting_for_the_interval(storage: Storage) -> None:
    org_id = await org(storage)
    writer = EventWriter(storage.events, flush_interval_s=3600, batch_size=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for n in range(10):
            writer.offer(event(org_id, n))
        with trio.fail_after(10):
            await wait_until(lambda: writer.stats.written == 10)
        nursery.cancel_scope.cancel()
    assert writer.stats.flushes == 1


async def test_a_full_buffer_drops_and_counts_never_blocks(storage: Storage) -> None:
    org_id = await org(storage)
    writer = EventWriter(storage.events, capacity=3)
    accepted = [writer.offer(event(org_id, n)) for n in range(5)]  # no checkpoint: never waits
    assert accepted == [True, True, True, False, False]
    stats = writer.statistics()
    assert {k: v for k, v in stats.items() if k != "inbox"} == {
        "queued": 3,
        "offered": 5,
        "written": 0,
        "dropped": 2,
        "flushes": 0,
        "flush_failures": 0,
        "keep_all": False,  # events may be dropped (counted); money never is
    }
    await writer.flush()
    assert [e.data["n"] for e in await storage.events.list_for_org(org_id)] == [0, 1, 2]
    assert writer.offer(event(org_id, 5))  # room again after the flush


async def test_stopping_writes_what_is_buffered(storage: Storage) -> None:
    org_id = await org(storage)
    writer = EventWriter(storage.events, flush_interval_s=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.offer(event(org_id, 1))
        nursery.cancel_scope.cancel()
    assert [e.data["n"] for e in await storage.events.list_for_org(org_id)] == [1]


class LostAcknowledgement(EventRepository):
    """Commits the first batch, then fails as if the connection dropped before the reply."""

    failed = False

    async def write_batch(self, batch: Sequence[NewEvent], *, skip_stored: bool = False) -> int:
        written = await super().write_batch(batch, skip_stored=skip_stored)
        if not self.failed:
            self.failed = True
            raise OSError("connection lost")
        return written


async def test_a_flush_whose_outcome_was_lost_is_retried_without_duplicates(
    storage: Storage,
) -> None:
    org_id = await org(storage)
    writer = EventWriter(LostAcknowledgement(storage.db))
    writer.offer(event(org_id, 1))
    await writer.flush()
    assert writer.stats.flush_failures == 1 and writer.statistics()["queued"] == 1
    writer.offer(event(org_id, 2))
    await writer.flush()
    assert [e.data["n"] for e in await storage.events.list_for_org(org_id)] == [1, 2]
    assert writer.stats.written == 1  # the retry found event 1 stored


class Refusing(EventRepository):
    async def write_batch(self, batch: Sequence[NewEvent], *, skip_stored: bool = False) -> int:
        raise OSError("database down")


async def test_a_failing_database_keeps_the_batch_and_then_drops_new_events(
    storage: Storage,
) -> None:
    writer = EventWriter(Refusing(storage.db), capacity=2)
    writer.offer(new_event("org_1", "completion.error", {}))
    writer.offer(new_event("org_1", "completion.error", {}))
    await writer.flush()
    assert writer.statistics()["queued"] == 2  # kept for the next try
    assert not writer.offer(new_event("org_1", "completion.error", {}))
    assert writer.stats.dropped == 1 and writer.stats.flush_failures == 1
