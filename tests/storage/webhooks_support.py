"""Helpers shared by the webhook repository tests: an org, a subscription, an event, a filled
queue, the log as (type, status) pairs, and an attempt."""

from __future__ import annotations

import trio

from protocol.ids import new_id
from storage import events
from storage.open import Storage
from storage.orgs import Org
from storage.webhooks import Attempt, NewWebhook, Webhook

T0 = 1_700_000_000_000_000
TTL = 15_000_000


async def org(storage: Storage, name: str = "acme") -> Org:
    return await storage.orgs.create(name)


async def hook(
    storage: Storage,
    org: Org,
    types: tuple[str, ...] = ("*",),
    *,
    enabled: bool = True,
    now: int = T0,
) -> Webhook:
    new = NewWebhook(
        id=new_id("whk"),
        org_id=org.id,
        url="https://example.com/hook",
        events=types,
        description="the receiver",
        enabled=enabled,
        secret_sealed="v1:sealed",
        secret_hint="whsec_…abcd",
    )
    return await storage.webhooks.create(new, now)


async def emit(storage: Storage, org: Org, type: str, **data: object) -> str:
    async with storage.db.transaction() as tx:
        return await events.append(tx, org.id, type, dict(data))


async def readable(storage: Storage) -> None:
    """Wait until every event written so far is readable: on PostgreSQL, behind the horizon
    (storage/webhooks/, "Order"), which any writing transaction in the cluster holds back
    while it runs — other test runs on the same server included."""
    if storage.db.dialect != "postgresql":
        return
    query = (
        "SELECT COALESCE(MAX(txid), 0) < pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
        " FROM events"
    )
    with trio.fail_after(30):
        while True:  # a condition on another server's state: nothing to wait on but time
            if await storage.db.fetchval(query):
                return
            await trio.sleep(0.01)


async def fill(storage: Storage, hook: Webhook, owner: str = "a", now: int = T0) -> int:
    await readable(storage)
    assert await storage.webhooks.claim(hook.id, owner, now, TTL)
    return await storage.webhooks.fill_queue(hook.id, owner, now, limit=100)


async def queue(storage: Storage, hook: Webhook) -> list[tuple[str, str]]:
    """(event type, status) of the log, oldest position first."""
    page = await storage.webhooks.deliveries(hook.org_id, hook.id, limit=1000, after=None)
    return [(d.event_type, d.status) for d, _ in reversed(page.items)]


def attempt(event_id: str, outcome: str = "delivered", code: int | None = 200) -> Attempt:
    return Attempt(event_id, T0, 12, code, None if code else "connect refused", outcome)
