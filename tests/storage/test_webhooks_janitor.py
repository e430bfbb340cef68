"""The webhook repository on every backend: queue metrics, and the janitor's purge (finished
deliveries, attempts and unreferenced events past the retention; never a pending row or an
event a delivery needs), in batches."""

from __future__ import annotations

from storage.open import Storage
from storage.webhooks import DELIVERED, FAILED, Attempt, QueueStats
from tests.storage import webhooks_support as ws
from tests.storage.webhooks_support import T0

CUTOFF = T0 + 100


async def test_queue_stats(storage: Storage) -> None:
    acme, other = await ws.org(storage), await ws.org(storage, "other")
    busy = await ws.hook(storage, acme)
    idle = await ws.hook(storage, other)
    off = await ws.hook(storage, acme, enabled=False)
    await ws.emit(storage, acme, "key.created")
    assert await ws.fill(storage, busy, now=T0 + 3) == 1
    await ws.emit(storage, acme, "key.created")
    assert await ws.fill(storage, busy, now=T0 + 7) == 1
    stats = {s.webhook_id: s for s in await storage.webhooks.queue_stats()}
    assert stats == {
        busy.id: QueueStats(busy.id, acme.id, 2, T0 + 3),
        idle.id: QueueStats(idle.id, other.id, 0, None),
    }
    assert off.id not in stats


async def _scene(storage: Storage) -> dict[str, str]:
    """Events and deliveries on both sides of CUTOFF; returns the event ids by name."""
    org = await ws.org(storage)
    ids = {"old_unqueued": await ws.emit(storage, org, "key.created")}
    ids["new_unqueued"] = await ws.emit(storage, org, "key.created")
    hook = await ws.hook(storage, org)
    for name in ("delivered_old", "delivered_new", "pending", "failed_old", "pending_retry"):
        ids[name] = await ws.emit(storage, org, "key.created")
    await storage.db.execute("UPDATE events SET created_at = :t", {"t": T0})
    await storage.db.execute(
        "UPDATE events SET created_at = :t WHERE id = :id", {"t": CUTOFF, "id": ids["new_unqueued"]}
    )
    assert await ws.fill(storage, hook) == 5
    outcomes = [
        ("delivered_old", DELIVERED, CUTOFF - 1),
        ("delivered_new", DELIVERED, CUTOFF),
        ("failed_old", FAILED, T0 + 50),
        ("pending_retry", "pending", T0 + 10),
    ]
    for name, status, at in outcomes:
        code = 200 if status == DELIVERED else 500
        attempt = Attempt(ids[name], at, 5, code, None, "delivered" if code == 200 else "retry")
        assert await storage.webhooks.record_attempt(
            hook.id, "a", attempt, status=status, next_attempt_at=at + 1, now=at
        )
    return ids


async def _left(storage: Storage, ids: dict[str, str]) -> tuple[set[str], set[str], set[str]]:
    names = {v: k for k, v in ids.items()}
    events = await storage.db.fetch("SELECT id FROM events")
    deliveries = await storage.db.fetch("SELECT event_id FROM webhook_deliveries")
    attempts = await storage.db.fetch("SELECT event_id FROM webhook_attempts")
    return (
        {names[r["id"]] for r in events},
        {names[r["event_id"]] for r in deliveries},
        {names[r["event_id"]] for r in attempts},
    )


EXPECTED_LEFT = (
    {"new_unqueued", "delivered_new", "pending", "pending_retry"},
    {"delivered_new", "pending", "pending_retry"},
    {"delivered_new"},  # the pending row's old attempt goes: attempts are kept by age alone
)


async def test_purge_keeps_pending_rows_and_what_they_need(storage: Storage) -> None:
    ids = await _scene(storage)
    # 3 attempts, 2 finished deliveries, and 3 events: the old unqueued one and those two rows'.
    assert await storage.webhooks.purge(CUTOFF, batch=100) == 8
    assert await _left(storage, ids) == EXPECTED_LEFT
    assert await storage.webhooks.purge(CUTOFF, batch=100) == 0


async def test_purge_in_batches(storage: Storage) -> None:
    ids = await _scene(storage)
    rounds = []
    while True:
        rounds.append(await storage.webhooks.purge(CUTOFF, batch=1))
        if rounds[-1] < 1:
            break
    assert sum(rounds) == 8 and max(rounds) <= 3 and len(rounds) > 3
    assert await _left(storage, ids) == EXPECTED_LEFT
