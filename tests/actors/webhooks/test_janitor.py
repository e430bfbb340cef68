"""The webhook janitor on real storage (both backends): it purges what is past the retention,
batch after batch until a short one, and nothing younger."""

from __future__ import annotations

import pytest

from actors.webhooks.clock import WallClock
from actors.webhooks.janitor import WebhookJanitor
from storage.open import Storage
from storage.webhooks import DELIVERED, Attempt
from tests.storage import webhooks_support as ws
from tests.storage.webhooks_support import T0

pytestmark = pytest.mark.storage

DAY_US = 86_400 * 1_000_000


async def _rows(storage: Storage) -> int:
    total = 0
    for table in ("events", "webhook_deliveries", "webhook_attempts"):
        total += int(await storage.db.fetchval(f"SELECT COUNT(*) FROM {table}"))
    return total


async def _delivered_at_t0(storage: Storage, count: int) -> None:
    org = await ws.org(storage)
    hook = await ws.hook(storage, org)
    ids = [await ws.emit(storage, org, "key.created") for _ in range(count)]
    await storage.db.execute("UPDATE events SET created_at = :t", {"t": T0})
    assert await ws.fill(storage, hook) == count
    for event_id in ids:
        attempt = Attempt(event_id, T0, 5, 200, None, "delivered")
        assert await storage.webhooks.record_attempt(
            hook.id, "a", attempt, status=DELIVERED, next_attempt_at=None, now=T0
        )


async def test_the_janitor_purges_past_the_retention_in_batches(storage: Storage) -> None:
    await _delivered_at_t0(storage, 5)
    assert await _rows(storage) == 15
    young = WebhookJanitor(
        storage.webhooks, retention_s=30 * 86_400, batch=2, clock=WallClock(T0 + 29 * DAY_US)
    )
    assert await young.purge_once() == 0
    old = WebhookJanitor(
        storage.webhooks, retention_s=30 * 86_400, batch=2, clock=WallClock(T0 + 31 * DAY_US)
    )
    assert await old.purge_once() == 15  # more than one batch: it went on until a short one
    assert await _rows(storage) == 0
    assert old.statistics() == {"purged": 15, "runs": 1}
