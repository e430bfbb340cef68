"""The webhook repository on every backend, the API side: updates (disable, enable and a new
filter restart delivery at the outbox head), deletion, secret rotation, redelivery at the tail
of the queue, and the paged delivery log. Another org's subscription behaves like none."""

from __future__ import annotations

from storage.open import Storage
from storage.webhooks import CANCELLED, DELIVERED, DISABLED_MANUAL, FAILED, PENDING
from tests.storage import webhooks_support as ws
from tests.storage.webhooks_support import T0, TTL


async def test_update_fields_and_other_orgs(storage: Storage) -> None:
    acme, other = await ws.org(storage), await ws.org(storage, "other")
    hook = await ws.hook(storage, acme)
    wh = storage.webhooks
    changed = await wh.update(
        acme.id, hook.id, T0 + 1, url="https://example.org/new", description=None
    )
    assert changed is not None
    assert changed.url == "https://example.org/new" and changed.description is None
    assert changed.updated_at == T0 + 1 and changed.created_at == T0
    assert changed.events == hook.events and changed.enabled
    assert await wh.update(other.id, hook.id, T0 + 2, url="https://evil.example/") is None
    assert await wh.update(acme.id, "whk_missing", T0 + 2, enabled=False) is None
    assert await wh.get(acme.id, hook.id) == changed


async def test_disable_then_enable_restarts_at_the_head(storage: Storage) -> None:
    org = await ws.org(storage)
    hook = await ws.hook(storage, org)
    wh = storage.webhooks
    await ws.emit(storage, org, "key.created")
    assert await ws.fill(storage, hook) == 1
    disabled = await wh.update(org.id, hook.id, T0 + 1, enabled=False)
    assert disabled is not None and not disabled.enabled
    assert (disabled.disabled_reason, disabled.disabled_at) == (DISABLED_MANUAL, T0 + 1)
    assert await ws.queue(storage, hook) == [("key.created", CANCELLED)]
    assert await wh.enabled() == []
    # Disabling again changes nothing (the reason and time stay).
    again = await wh.update(org.id, hook.id, T0 + 2, enabled=False)
    assert again is not None and again.disabled_at == T0 + 1

    await ws.emit(storage, org, "key.deleted")  # written while disabled: not delivered
    enabled = await wh.update(org.id, hook.id, T0 + 3, enabled=True)
    assert enabled is not None and enabled.enabled
    assert enabled.disabled_reason is None and enabled.disabled_at is None
    assert await ws.fill(storage, hook) == 0
    await ws.emit(storage, org, "key.updated")
    assert await ws.fill(storage, hook) == 1
    assert await ws.queue(storage, hook) == [
        ("key.created", CANCELLED),
        ("key.updated", PENDING),
    ]


async def test_a_new_filter_applies_to_the_next_event(storage: Storage) -> None:
    org = await ws.org(storage)
    hook = await ws.hook(storage, org, ("key.created",))
    wh = storage.webhooks
    first = await ws.emit(storage, org, "key.created")
    assert await ws.fill(storage, hook) == 1
    # The same filter again: nothing restarts, the pending row stays.
    assert await wh.update(org.id, hook.id, T0 + 1, events=("key.created",)) is not None
    assert await ws.queue(storage, hook) == [("key.created", PENDING)]

    await ws.emit(storage, org, "key.deleted")  # before the change: not delivered
    changed = await wh.update(org.id, hook.id, T0 + 2, events=("key.deleted",))
    assert changed is not None and changed.events == ("key.deleted",)
    assert await ws.queue(storage, hook) == [("key.created", CANCELLED)]
    # The attempt that was in flight finds its delivery cancelled: nothing is written.
    assert not await wh.record_attempt(
        hook.id, "a", ws.attempt(first), status=DELIVERED, next_attempt_at=None, now=T0 + 3
    )
    await ws.emit(storage, org, "key.created")
    await ws.emit(storage, org, "key.deleted")
    assert await ws.fill(storage, hook) == 1
    assert await ws.queue(storage, hook) == [
        ("key.created", CANCELLED),
        ("key.deleted", PENDING),
    ]
    page = await wh.deliveries(org.id, hook.id, limit=10, after=None)
    assert page.items[1][1] == []  # no attempt was logged


async def test_delete_removes_the_queue_and_log(storage: Storage) -> None:
    acme, other = await ws.org(storage), await ws.org(storage, "other")
    hook = await ws.hook(storage, acme)
    kept = await ws.hook(storage, acme)
    event = await ws.emit(storage, acme, "key.created")
    assert await ws.fill(storage, hook) == 1 and await ws.fill(storage, kept) == 1
    for h in (hook, kept):
        assert await storage.webhooks.record_attempt(
            h.id, "a", ws.attempt(event), status=DELIVERED, next_attempt_at=None, now=T0
        )
    assert not await storage.webhooks.delete(other.id, hook.id)
    assert not await storage.webhooks.delete(acme.id, "whk_missing")
    assert await storage.webhooks.delete(acme.id, hook.id)
    assert await storage.webhooks.get(acme.id, hook.id) is None
    assert not await storage.webhooks.claim(hook.id, "a", T0, TTL)
    for table in ("webhook_deliveries", "webhook_attempts"):
        rows = await storage.db.fetch(f"SELECT webhook_id FROM {table}")
        assert [r["webhook_id"] for r in rows] == [kept.id]
    assert not await storage.webhooks.delete(acme.id, hook.id)


async def test_rotate_secret(storage: Storage) -> None:
    acme, other = await ws.org(storage), await ws.org(storage, "other")
    hook = await ws.hook(storage, acme)
    kwargs = {
        "secret_sealed": "v1:new",
        "secret_hint": "whsec_…wxyz",
        "previous_secret_sealed": "v1:old",
        "previous_expires_at": T0 + 86_400_000_000,
    }
    assert await storage.webhooks.rotate_secret(other.id, hook.id, T0 + 1, **kwargs) is None
    rotated = await storage.webhooks.rotate_secret(acme.id, hook.id, T0 + 1, **kwargs)
    assert rotated is not None
    assert (rotated.secret_sealed, rotated.secret_hint) == ("v1:new", "whsec_…wxyz")
    assert rotated.previous_secret_sealed == "v1:old"
    assert rotated.previous_secret_expires_at == T0 + 86_400_000_000
    assert rotated.updated_at == T0 + 1
    assert await storage.webhooks.by_id(hook.id) == rotated


async def test_redeliver_queues_at_the_tail(storage: Storage) -> None:
    acme, other = await ws.org(storage), await ws.org(storage, "other")
    before = await ws.emit(storage, acme, "key.created")  # before creation, matching
    unmatched = await ws.emit(storage, acme, "budget.exhausted")
    hook = await ws.hook(storage, acme, ("key.created", "key.deleted"))
    sibling = await ws.hook(storage, acme)
    e1 = await ws.emit(storage, acme, "key.created")
    await ws.emit(storage, acme, "key.deleted")
    theirs = await ws.emit(storage, other, "key.created")
    targeted, _ = await storage.webhooks.append_test_event(acme.id, sibling.id, "key.created", {})
    assert await ws.fill(storage, hook) == 2
    wh = storage.webhooks
    assert await wh.record_attempt(
        hook.id, "a", ws.attempt(e1), status=DELIVERED, next_attempt_at=None, now=T0 + 1
    )
    again = await wh.redeliver(acme.id, hook.id, e1, T0 + 5)
    assert again is not None and again.event_id == e1 and again.position == 3
    assert (again.status, again.attempts, again.next_attempt_at) == (PENDING, 0, T0 + 5)
    assert again.last_status_code is None and again.updated_at == T0 + 5
    head = await wh.head(hook.id)
    assert head is not None and head.event_type == "key.deleted"  # e1 now waits behind it
    # An event from before creation that it would receive: queued after the rest.
    old = await wh.redeliver(acme.id, hook.id, before, T0 + 6)
    assert old is not None and old.position == 4
    # Not one it would receive: outside its filter, another org's, another subscription's.
    for event_id in (unmatched, theirs, targeted, "evt_missing"):
        assert await wh.redeliver(acme.id, hook.id, event_id, T0 + 7) is None
    assert await wh.redeliver(other.id, hook.id, e1, T0 + 7) is None
    # The cursor reaching an event already queued by hand leaves it as it is.
    await ws.emit(storage, acme, "key.created")
    assert await ws.fill(storage, hook) == 1
    assert [t for t, _ in await ws.queue(storage, hook)] == [
        "key.deleted",
        "key.created",
        "key.created",
        "key.created",
    ]
    page = await wh.deliveries(acme.id, hook.id, limit=10, after=None)
    assert [a.outcome for a in page.items[2][1]] == ["delivered"]  # e1 keeps its history


async def test_redeliver_since(storage: Storage) -> None:
    acme, other = await ws.org(storage), await ws.org(storage, "other")
    hook = await ws.hook(storage, acme, ("key.created",))
    wh = storage.webhooks
    ids = [await ws.emit(storage, acme, "key.created", i=i) for i in range(3)]
    for i, event_id in enumerate(ids):
        await storage.db.execute(
            "UPDATE events SET created_at = :t WHERE id = :id", {"t": T0 + i, "id": event_id}
        )
    assert await ws.fill(storage, hook) == 3
    assert await wh.record_attempt(
        hook.id, "a", ws.attempt(ids[0]), status=DELIVERED, next_attempt_at=None, now=T0
    )
    assert await wh.record_attempt(
        hook.id,
        "a",
        ws.attempt(ids[1], "permanent", 404),
        status=FAILED,
        next_attempt_at=None,
        now=T0,
    )
    await wh.update(acme.id, hook.id, T0, enabled=False)  # ids[2] cancelled
    while_disabled = await ws.emit(storage, acme, "key.created")
    await ws.emit(storage, acme, "budget.exhausted")  # outside the filter
    await storage.db.execute(
        "UPDATE events SET created_at = :t WHERE created_at > :t", {"t": T0 + 3}
    )
    await wh.update(acme.id, hook.id, T0, enabled=True)
    pending = await ws.emit(storage, acme, "key.created")
    assert await ws.fill(storage, hook) == 1

    assert await wh.redeliver_since(other.id, hook.id, 0, T0 + 9, limit=10) == 0
    # From the second event on, two at a time.
    assert await wh.redeliver_since(acme.id, hook.id, T0 + 1, T0 + 9, limit=2) == 2
    assert await wh.redeliver_since(acme.id, hook.id, T0 + 1, T0 + 9, limit=2) == 1
    assert await wh.redeliver_since(acme.id, hook.id, T0 + 1, T0 + 9, limit=2) == 0
    page = await wh.deliveries(acme.id, hook.id, limit=10, after=None)
    log = [(d.event_id, d.status, d.position) for d, _ in reversed(page.items)]
    assert log == [
        (ids[0], DELIVERED, 1),
        (pending, PENDING, 4),
        (ids[1], PENDING, 5),
        (ids[2], PENDING, 6),
        (while_disabled, PENDING, 7),
    ]


async def test_deliveries_pages_newest_first(storage: Storage) -> None:
    acme, other = await ws.org(storage), await ws.org(storage, "other")
    hook = await ws.hook(storage, acme)
    ids = [await ws.emit(storage, acme, "key.created", i=i) for i in range(5)]
    assert await ws.fill(storage, hook) == 5
    wh = storage.webhooks
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        page = await wh.deliveries(acme.id, hook.id, limit=2, after=after)
        seen += [d.event_id for d, _ in page.items]
        pages += 1
        if not page.has_more:
            break
        after = page.items[-1][0].event_id
    assert seen == ids[::-1] and pages == 3
    first = (await wh.deliveries(acme.id, hook.id, limit=2, after=None)).items
    assert (await wh.deliveries(acme.id, hook.id, limit=2, after="evt_unknown")).items == first
    assert first[0][0].data_json == '{"i":4}'
    empty = await wh.deliveries(other.id, hook.id, limit=10, after=None)
    assert empty.items == [] and not empty.has_more
