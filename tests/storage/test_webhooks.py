"""The webhook repository on every backend, the core: subscriptions scoped to their org, the
cursor set at creation, leases, the queue filled in outbox order through the filter, attempts
and their outcomes (a drop disables), the waker's outbox reads. The API side (update,
redelivery, the log) is in test_webhooks_api.py, the metrics and janitor in
test_webhooks_janitor.py."""

from __future__ import annotations

import json

import pytest
import trio

from storage import events
from storage.open import Storage
from storage.webhooks import (
    CANCELLED,
    DELIVERED,
    DISABLED_FAILING,
    DISABLED_MANUAL,
    DROPPED,
    FAILED,
    PENDING,
)
from tests.storage import webhooks_support as ws
from tests.storage.webhooks_support import T0, TTL


async def test_create_get_list_and_by_id(storage: Storage) -> None:
    acme, other = await ws.org(storage), await ws.org(storage, "other")
    first = await ws.hook(storage, acme, ("key.created", "key.deleted"))
    assert first.events == ("key.created", "key.deleted") and first.enabled
    assert first.created_at == first.updated_at == T0 and first.disabled_reason is None
    assert first.previous_secret_sealed is None and first.secret_sealed == "v1:sealed"
    second = await ws.hook(storage, acme, now=T0 + 1)
    theirs = await ws.hook(storage, other)
    assert await storage.webhooks.get(acme.id, first.id) == first
    assert await storage.webhooks.get(acme.id, theirs.id) is None
    assert await storage.webhooks.by_id(theirs.id) == theirs
    assert await storage.webhooks.by_id("whk_missing") is None

    page = await storage.webhooks.list_for_org(acme.id, limit=1, after=None)
    assert page.items == [first] and page.has_more
    page = await storage.webhooks.list_for_org(acme.id, limit=1, after=first.id)
    assert page.items == [second] and not page.has_more
    # Another org's id, or an unknown one, as `after`: from the start.
    page = await storage.webhooks.list_for_org(acme.id, limit=5, after=theirs.id)
    assert page.items == [first, second] and not page.has_more

    disabled = await ws.hook(storage, other, enabled=False)
    assert not disabled.enabled and disabled.disabled_reason == DISABLED_MANUAL
    assert sorted(await storage.webhooks.enabled()) == sorted(
        [(first.id, acme.id), (second.id, acme.id), (theirs.id, other.id)]
    )


async def test_only_events_written_after_creation_are_delivered(storage: Storage) -> None:
    org = await ws.org(storage)
    await ws.emit(storage, org, "key.created", n=1)
    hook = await ws.hook(storage, org)
    assert await ws.fill(storage, hook) == 0
    assert await storage.webhooks.head(hook.id) is None
    event_id = await ws.emit(storage, org, "key.deleted", n=2)
    assert await ws.fill(storage, hook) == 1
    head = await storage.webhooks.head(hook.id)
    assert head is not None and head.event_id == event_id and head.event_type == "key.deleted"
    assert head.status == PENDING and head.attempts == 0 and head.next_attempt_at == T0
    assert head.data_json == '{"n":2}' and head.position == 1
    # The cursor moved past it: a second fill queues nothing more.
    assert await ws.fill(storage, hook) == 0


async def test_filter_targeted_test_events_and_other_orgs(storage: Storage) -> None:
    acme, other = await ws.org(storage), await ws.org(storage, "other")
    keys = await ws.hook(storage, acme, ("key.created",))
    everything = await ws.hook(storage, acme, ("*",))
    await ws.emit(storage, acme, "key.created")
    await ws.emit(storage, acme, "budget.exhausted")
    await ws.emit(storage, other, "key.created")  # another org's: nobody here gets it
    test_id, created_at = await storage.webhooks.append_test_event(
        acme.id, keys.id, "cache.purged", {"test": True}
    )
    assert test_id.startswith("evt_") and created_at > 0
    await storage.webhooks.append_test_event(acme.id, everything.id, "key.deleted", {})
    assert await ws.fill(storage, keys) == 2
    assert await ws.fill(storage, everything) == 3
    # The targeted event ignores the filter; the other subscription's test event is not ours.
    assert await ws.queue(storage, keys) == [("key.created", PENDING), ("cache.purged", PENDING)]
    assert await ws.queue(storage, everything) == [
        ("key.created", PENDING),
        ("budget.exhausted", PENDING),
        ("key.deleted", PENDING),
    ]
    with pytest.raises(LookupError):
        await storage.webhooks.append_test_event(other.id, keys.id, "key.created", {})


async def test_fill_queue_reads_in_batches_and_moves_the_cursor_past_non_matching(
    storage: Storage,
) -> None:
    org = await ws.org(storage)
    hook = await ws.hook(storage, org, ("key.created",))
    for i in range(5):
        await ws.emit(storage, org, "budget.exhausted" if i % 2 else "key.created", i=i)
    assert await storage.webhooks.claim(hook.id, "a", T0, TTL)
    await ws.readable(storage)
    counts = [await storage.webhooks.fill_queue(hook.id, "a", T0, limit=2) for _ in range(4)]
    assert counts == [1, 1, 1, 0]  # read 2, 2, 1, 0 events; i = 0, 2, 4 match
    queued = await storage.webhooks.deliveries(org.id, hook.id, limit=10, after=None)
    assert [json.loads(d.data_json)["i"] for d, _ in reversed(queued.items)] == [0, 2, 4]
    assert [d.position for d, _ in reversed(queued.items)] == [1, 2, 3]


async def test_leases(storage: Storage) -> None:
    org = await ws.org(storage)
    hook = await ws.hook(storage, org)
    wh = storage.webhooks
    assert await wh.claim(hook.id, "a", T0, TTL)
    assert not await wh.claim(hook.id, "b", T0 + TTL - 1, TTL)  # held by a
    assert await wh.claim(hook.id, "a", T0 + TTL - 1, TTL)  # renewed
    assert not await wh.claim(hook.id, "b", T0 + TTL, TTL)
    assert await wh.fill_queue(hook.id, "b", T0 + TTL, limit=10) == -1
    assert await wh.fill_queue(hook.id, "a", T0 + TTL, limit=10) == 0
    # Expired: b takes it, and a's writes are refused from then on.
    assert await wh.claim(hook.id, "b", T0 + 2 * TTL - 1, TTL)
    assert await wh.fill_queue(hook.id, "a", T0 + 2 * TTL, limit=10) == -1
    # Release by a non-owner changes nothing; by the owner frees it at once.
    await wh.release(hook.id, "a")
    assert not await wh.claim(hook.id, "a", T0 + 2 * TTL, TTL)
    await wh.release(hook.id, "b")
    assert await wh.claim(hook.id, "a", T0 + 2 * TTL, TTL)
    # Disabled or gone: nobody gets it, and the holder's writes stop.
    await wh.update(org.id, hook.id, T0, enabled=False)
    assert not await wh.claim(hook.id, "a", T0 + 2 * TTL, TTL)
    assert await wh.fill_queue(hook.id, "a", T0 + 2 * TTL, limit=10) == -1
    assert not await wh.claim("whk_missing", "a", T0, TTL)


async def test_concurrent_claims_leave_one_owner(storage: Storage) -> None:
    org = await ws.org(storage)
    hook = await ws.hook(storage, org)
    won: list[str] = []

    async def claim(owner: str) -> None:
        if await storage.webhooks.claim(hook.id, owner, T0, TTL):
            won.append(owner)

    async with trio.open_nursery() as nursery:
        for owner in "abcdef":
            nursery.start_soon(claim, owner)
    assert len(won) == 1


async def test_record_attempt_retry_then_delivered(storage: Storage) -> None:
    org = await ws.org(storage)
    hook = await ws.hook(storage, org)
    first = await ws.emit(storage, org, "key.created")
    second = await ws.emit(storage, org, "key.deleted")
    assert await ws.fill(storage, hook) == 2
    wh = storage.webhooks
    retry = ws.attempt(first, "retry", 503)
    assert await wh.record_attempt(
        hook.id, "a", retry, status=PENDING, next_attempt_at=T0 + 10_000_000, now=T0 + 1
    )
    head = await wh.head(hook.id)
    assert head is not None and head.event_id == first  # strict order: it holds the queue
    assert head.attempts == 1 and head.next_attempt_at == T0 + 10_000_000
    assert head.last_status_code == 503 and head.updated_at == T0 + 1
    # Not the owner: nothing written.
    assert not await wh.record_attempt(
        hook.id, "b", ws.attempt(first), status=DELIVERED, next_attempt_at=None, now=T0 + 2
    )
    assert await wh.record_attempt(
        hook.id, "a", ws.attempt(first), status=DELIVERED, next_attempt_at=None, now=T0 + 2
    )
    head = await wh.head(hook.id)
    assert head is not None and head.event_id == second
    assert await wh.record_attempt(
        hook.id,
        "a",
        ws.attempt(second, "permanent", 410),
        status=FAILED,
        next_attempt_at=None,
        now=T0 + 3,
    )
    assert await wh.head(hook.id) is None
    # A delivery that is no longer pending takes no attempt.
    assert not await wh.record_attempt(
        hook.id, "a", ws.attempt(second), status=DELIVERED, next_attempt_at=None, now=T0 + 4
    )
    page = await wh.deliveries(org.id, hook.id, limit=10, after=None)
    (d2, a2), (d1, a1) = page.items
    assert (d2.event_id, d2.status, d2.attempts, d2.next_attempt_at) == (second, FAILED, 1, None)
    assert (d1.event_id, d1.status, d1.attempts) == (first, DELIVERED, 2)
    assert [a.outcome for a in a1] == ["retry", "delivered"]
    assert a1[0] == retry and [a.status_code for a in a2] == [410]


async def test_dropped_disables_and_cancels_the_rest(storage: Storage) -> None:
    org = await ws.org(storage)
    hook = await ws.hook(storage, org)
    first = await ws.emit(storage, org, "key.created")
    await ws.emit(storage, org, "key.deleted")
    assert await ws.fill(storage, hook) == 2
    assert await storage.webhooks.record_attempt(
        hook.id,
        "a",
        ws.attempt(first, "retry", None),
        status=DROPPED,
        next_attempt_at=None,
        now=T0 + 5,
    )
    after = await storage.webhooks.get(org.id, hook.id)
    assert after is not None and not after.enabled
    assert after.disabled_reason == DISABLED_FAILING and after.disabled_at == T0 + 5
    assert await ws.queue(storage, hook) == [("key.created", DROPPED), ("key.deleted", CANCELLED)]
    assert await storage.webhooks.head(hook.id) is None
    assert not await storage.webhooks.claim(hook.id, "a", T0 + 6, TTL)
    assert await storage.webhooks.enabled() == []


async def test_outbox_head_and_orgs_with_events_after(storage: Storage) -> None:
    wh = storage.webhooks
    assert await wh.outbox_head() == (0, 0)
    acme, other = await ws.org(storage), await ws.org(storage, "other")
    await ws.emit(storage, acme, "key.created")
    await ws.readable(storage)
    start = await wh.outbox_head()
    assert start != (0, 0)
    assert await wh.orgs_with_events_after(start, limit=10) == (set(), start)
    await ws.emit(storage, acme, "key.created")
    await ws.emit(storage, other, "key.created")
    await ws.emit(storage, acme, "key.deleted")
    await ws.readable(storage)
    orgs, position = await wh.orgs_with_events_after(start, limit=2)
    assert orgs == {acme.id, other.id}
    orgs, position = await wh.orgs_with_events_after(position, limit=2)
    assert orgs == {acme.id} and position == await wh.outbox_head()
    assert await wh.orgs_with_events_after(position, limit=2) == (set(), position)
    # Among some orgs only: the others' events are passed over.
    orgs, among = await wh.orgs_with_events_after(start, limit=10, orgs={other.id})
    assert orgs == {other.id} and start < among < position
    assert await wh.orgs_with_events_after(start, limit=10, orgs=set()) == (set(), start)


async def test_a_large_batch_is_queued_in_order(storage: Storage) -> None:
    org = await ws.org(storage)
    hook = await ws.hook(storage, org)
    async with storage.db.transaction() as tx:
        written = [await events.append(tx, org.id, "key.created", {"i": i}) for i in range(1100)]
    await ws.readable(storage)
    assert await storage.webhooks.claim(hook.id, "a", T0, TTL)
    # More than one INSERT statement's worth.
    assert await storage.webhooks.fill_queue(hook.id, "a", T0, limit=5000) == 1100
    page = await storage.webhooks.deliveries(org.id, hook.id, limit=5000, after=None)
    log = [(d.event_id, d.position) for d, _ in reversed(page.items)]
    assert log == [(event_id, i + 1) for i, event_id in enumerate(written)]


async def test_concurrent_fills_queue_each_event_once_in_order(storage: Storage) -> None:
    org = await ws.org(storage)
    hook = await ws.hook(storage, org)
    async with storage.db.transaction() as tx:
        written = [await events.append(tx, org.id, "key.created", {"i": i}) for i in range(40)]
    await ws.readable(storage)
    assert await storage.webhooks.claim(hook.id, "a", T0, TTL)
    counts: list[int] = []

    async def fill() -> None:
        counts.append(await storage.webhooks.fill_queue(hook.id, "a", T0, limit=10))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(fill)
    assert counts == [10, 10, 10, 10]
    page = await storage.webhooks.deliveries(org.id, hook.id, limit=100, after=None)
    log = [(d.event_id, d.position) for d, _ in reversed(page.items)]
    assert log == [(event_id, i + 1) for i, event_id in enumerate(written)]
