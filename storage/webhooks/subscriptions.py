"""The API side of the repository: subscriptions, test events, the delivery log and
redelivery."""

from __future__ import annotations

import json

from protocol.ids import new_id
from protocol.timefmt import now_us
from storage.database import Database
from storage.webhooks.records import (
    DELIVERY_SELECT,
    DISABLED_MANUAL,
    REQUEUEABLE,
    UNSET,
    WEBHOOK_COLUMNS,
    Attempt,
    Delivery,
    NewWebhook,
    Page,
    Unset,
    Webhook,
)
from storage.webhooks.rows import (
    attempt_of,
    cancel_pending,
    delivery_of,
    events_json,
    get_delivery,
    get_webhook,
    lock_webhook,
    next_position,
    org_head,
    receives_row,
    receives_sql,
    requeue,
    webhook_of,
)


class Subscriptions:
    _db: Database

    # -- subscriptions (the API) -------------------------------------------------------

    async def create(self, new: NewWebhook, now: int) -> Webhook:
        """Insert it with the cursor at the org's outbox head: it gets events written after.
        Created disabled (`enabled` false), its `disabled_reason` is "manual"."""
        async with self._db.transaction() as tx:
            txid, seq = await org_head(tx, new.org_id)
            await tx.execute(
                "INSERT INTO webhooks (id, org_id, url, events, description, enabled,"
                " secret_sealed, secret_hint, cursor_txid, cursor_seq, created_at, updated_at)"
                " VALUES (:id, :org_id, :url, :events, :description, :enabled, :sealed, :hint,"
                " :txid, :seq, :now, :now)",
                {
                    "id": new.id,
                    "org_id": new.org_id,
                    "url": new.url,
                    "events": events_json(new.events),
                    "description": new.description,
                    "enabled": new.enabled,
                    "sealed": new.secret_sealed,
                    "hint": new.secret_hint,
                    "txid": txid,
                    "seq": seq,
                    "now": now,
                },
            )
            if not new.enabled:
                await tx.execute(
                    "UPDATE webhooks SET disabled_reason = :manual, disabled_at = :now"
                    " WHERE id = :id",
                    {"manual": DISABLED_MANUAL, "now": now, "id": new.id},
                )
            created = await get_webhook(tx, new.org_id, new.id)
        assert created is not None  # inserted just now, in this transaction
        return created

    async def get(self, org_id: str, webhook_id: str) -> Webhook | None:
        return await get_webhook(self._db, org_id, webhook_id)

    async def list_for_org(self, org_id: str, *, limit: int, after: str | None) -> Page[Webhook]:
        """Oldest first; `after` a webhook id of this org (an unknown id: from the start)."""
        start = await get_webhook(self._db, org_id, after) if after is not None else None
        params: dict[str, object] = {"org_id": org_id, "limit": limit + 1}
        where = "org_id = :org_id"
        if start is not None:
            where += " AND (created_at > :c OR (created_at = :c AND id > :after))"
            params.update(c=start.created_at, after=start.id)
        rows = await self._db.fetch(
            f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE {where}"
            " ORDER BY created_at, id LIMIT :limit",
            params,
        )
        return Page([webhook_of(r) for r in rows[:limit]], has_more=len(rows) > limit)

    async def update(
        self,
        org_id: str,
        webhook_id: str,
        now: int,
        *,
        url: str | Unset = UNSET,
        events: tuple[str, ...] | Unset = UNSET,
        description: str | None | Unset = UNSET,
        enabled: bool | Unset = UNSET,
    ) -> Webhook | None:
        """Change the given fields. Disabling clears nothing but stops delivery: pending rows
        become cancelled and `disabled_reason` is "manual". Enabling (from disabled) or changing
        `events` moves the cursor to the outbox head (the change takes effect for the next
        event written), cancels what was pending, and clears `disabled_*`. Setting what is
        already set (`enabled` true on an enabled one, the same `events`) changes nothing."""
        async with self._db.transaction() as tx:
            # An UPDATE first: it locks the row (PostgreSQL) against a concurrent fill_queue
            # or update until this transaction ends.
            row = await tx.fetchrow(
                "UPDATE webhooks SET updated_at = :now WHERE id = :id AND org_id = :org_id"
                f" RETURNING {WEBHOOK_COLUMNS}",
                {"now": now, "id": webhook_id, "org_id": org_id},
            )
            if row is None:
                return None
            current = webhook_of(row)
            sets: dict[str, object] = {}
            if not isinstance(url, Unset):
                sets["url"] = url
            if not isinstance(description, Unset):
                sets["description"] = description
            restart = False
            if not isinstance(events, Unset) and tuple(events) != current.events:
                sets["events"] = events_json(events)
                restart = True
            if not isinstance(enabled, Unset) and enabled != current.enabled:
                sets["enabled"] = enabled
                if enabled:
                    sets.update(disabled_reason=None, disabled_at=None)
                    restart = True
                else:
                    sets.update(disabled_reason=DISABLED_MANUAL, disabled_at=now)
                    await cancel_pending(tx, webhook_id, now)
            if restart:
                sets["cursor_txid"], sets["cursor_seq"] = await org_head(tx, org_id)
                await cancel_pending(tx, webhook_id, now)
            if sets:
                assignments = ", ".join(f"{column} = :{column}" for column in sets)
                await tx.execute(
                    f"UPDATE webhooks SET {assignments} WHERE id = :id",
                    {**sets, "id": webhook_id},
                )
            return await get_webhook(tx, org_id, webhook_id)

    async def delete(self, org_id: str, webhook_id: str) -> bool:
        """Remove the subscription, its deliveries and attempts. (Test events targeted at it
        stay in the outbox until the janitor removes them.)"""
        async with self._db.transaction() as tx:
            gone = await tx.execute(
                "DELETE FROM webhooks WHERE id = :id AND org_id = :org_id",
                {"id": webhook_id, "org_id": org_id},
            )
            if not gone:
                return False
            params = {"id": webhook_id}
            await tx.execute("DELETE FROM webhook_attempts WHERE webhook_id = :id", params)
            await tx.execute("DELETE FROM webhook_deliveries WHERE webhook_id = :id", params)
        return True

    async def rotate_secret(
        self,
        org_id: str,
        webhook_id: str,
        now: int,
        *,
        secret_sealed: str,
        secret_hint: str,
        previous_secret_sealed: str,
        previous_expires_at: int,
    ) -> Webhook | None:
        """Replace the secret; the caller re-sealed the current one as the previous one
        (it still signs until `previous_expires_at`)."""
        async with self._db.transaction() as tx:
            changed = await tx.execute(
                "UPDATE webhooks SET secret_sealed = :sealed, secret_hint = :hint,"
                " previous_secret_sealed = :previous, previous_secret_expires_at = :expires,"
                " updated_at = :now WHERE id = :id AND org_id = :org_id",
                {
                    "sealed": secret_sealed,
                    "hint": secret_hint,
                    "previous": previous_secret_sealed,
                    "expires": previous_expires_at,
                    "now": now,
                    "id": webhook_id,
                    "org_id": org_id,
                },
            )
            return await get_webhook(tx, org_id, webhook_id) if changed else None

    async def append_test_event(
        self, org_id: str, webhook_id: str, event_type: str, data: dict[str, object]
    ) -> tuple[str, int]:
        """An outbox event for this subscription only; returns (event id, created_at).
        LookupError when the subscription is not the org's (nothing written)."""
        event_id, created_at = new_id("evt"), now_us()
        async with self._db.transaction() as tx:
            written = await tx.execute(
                "INSERT INTO events (id, org_id, type, data, created_at, webhook_id)"
                " SELECT :event_id, org_id, :type, :data, :now, id FROM webhooks"
                " WHERE id = :id AND org_id = :org_id",
                {
                    "event_id": event_id,
                    "type": event_type,
                    "data": json.dumps(data, separators=(",", ":")),
                    "now": created_at,
                    "id": webhook_id,
                    "org_id": org_id,
                },
            )
            if not written:
                raise LookupError("no such webhook")
        return event_id, created_at

    # -- the delivery log (the API) ----------------------------------------------------

    async def deliveries(
        self, org_id: str, webhook_id: str, *, limit: int, after: str | None
    ) -> Page[tuple[Delivery, list[Attempt]]]:
        """Newest first (by `position`), each with its attempts oldest first; `after` an
        event id of this subscription's log (an unknown one: from the start). Empty when the
        subscription is not the org's."""
        if await get_webhook(self._db, org_id, webhook_id) is None:
            return Page([], has_more=False)
        params: dict[str, object] = {"id": webhook_id, "limit": limit + 1}
        where = "d.webhook_id = :id"
        if after is not None:
            start = await self._db.fetchval(
                "SELECT position FROM webhook_deliveries WHERE webhook_id = :id"
                " AND event_id = :after",
                {"id": webhook_id, "after": after},
            )
            if start is not None:
                where += " AND d.position < :start"
                params["start"] = int(start)
        rows = await self._db.fetch(
            f"{DELIVERY_SELECT} WHERE {where} ORDER BY d.position DESC LIMIT :limit", params
        )
        page = [delivery_of(r) for r in rows[:limit]]
        attempts: dict[str, list[Attempt]] = {d.event_id: [] for d in page}
        if page:
            names = {f"e{i}": d.event_id for i, d in enumerate(page)}
            found = await self._db.fetch(
                "SELECT event_id, started_at, duration_ms, status_code, error, outcome"
                " FROM webhook_attempts WHERE webhook_id = :id AND event_id IN"
                f" ({', '.join(':' + n for n in names)}) ORDER BY seq",
                {**names, "id": webhook_id},
            )
            for row in found:
                attempts[row["event_id"]].append(attempt_of(row))
        return Page([(d, attempts[d.event_id]) for d in page], has_more=len(rows) > limit)

    async def redeliver(
        self, org_id: str, webhook_id: str, event_id: str, now: int
    ) -> Delivery | None:
        """Queue the event again at the tail: pending, attempts 0, due now. The event must be
        one this subscription would receive (in its log, or in the org's outbox and matching
        its filter); None otherwise."""
        async with self._db.transaction() as tx:
            hook = await lock_webhook(tx, org_id, webhook_id)
            if hook is None:
                return None
            logged = await tx.fetchval(
                "SELECT 1 FROM webhook_deliveries WHERE webhook_id = :id AND event_id = :e",
                {"id": webhook_id, "e": event_id},
            )
            if logged is None:
                event = await tx.fetchrow(
                    "SELECT type, webhook_id FROM events WHERE id = :e AND org_id = :org_id",
                    {"e": event_id, "org_id": org_id},
                )
                if event is None or not receives_row(webhook_id, hook.events, event):
                    return None
            await requeue(tx, webhook_id, event_id, await next_position(tx, webhook_id), now)
            return await get_delivery(tx, webhook_id, event_id)

    async def redeliver_since(
        self, org_id: str, webhook_id: str, since: int, now: int, *, limit: int
    ) -> int:
        """Queue again, in outbox order, every event since `since` (created_at) that this
        subscription would receive and that is not delivered or pending: failed, dropped,
        cancelled, and events written while it was disabled. At most `limit`; returns how many.
        Only events its cursor has passed: the ones ahead of it are queued by fill_queue."""
        async with self._db.transaction() as tx:
            row = await tx.fetchrow(
                "UPDATE webhooks SET cursor_seq = cursor_seq WHERE id = :id AND org_id = :org_id"
                " RETURNING events, cursor_txid, cursor_seq",
                {"id": webhook_id, "org_id": org_id},
            )
            if row is None:
                return 0
            receives, params = receives_sql(webhook_id, json.loads(row["events"]))
            found = await tx.fetch(
                "SELECT e.id FROM events e LEFT JOIN webhook_deliveries d"
                " ON d.webhook_id = :id AND d.event_id = e.id"
                " WHERE e.org_id = :org_id AND e.created_at >= :since"
                " AND (e.txid, e.seq) <= (:ct, :cs)"
                f" AND {receives} AND (d.status IS NULL OR d.status IN (:s0, :s1, :s2))"
                " ORDER BY e.txid, e.seq LIMIT :limit",
                {
                    **params,
                    "id": webhook_id,
                    "org_id": org_id,
                    "since": since,
                    "ct": int(row["cursor_txid"]),
                    "cs": int(row["cursor_seq"]),
                    "s0": REQUEUEABLE[0],
                    "s1": REQUEUEABLE[1],
                    "s2": REQUEUEABLE[2],
                    "limit": limit,
                },
            )
            position = await next_position(tx, webhook_id)
            for offset, event in enumerate(found):
                await requeue(tx, webhook_id, event["id"], position + offset, now)
        return len(found)
