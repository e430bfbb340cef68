"""The delivery side of the repository: leases, filling and reading a queue, recording
attempts, the outbox positions that wake the actors, queue statistics, and the janitor's purge."""

from __future__ import annotations

import json
from collections.abc import Collection

from storage.database import Database
from storage.webhooks.records import (
    DELIVERY_SELECT,
    DISABLED_FAILING,
    DROPPED,
    LEASED,
    PENDING,
    WEBHOOK_COLUMNS,
    Attempt,
    Delivery,
    QueueStats,
    Webhook,
)
from storage.webhooks.rows import (
    cancel_pending,
    delivery_of,
    horizon,
    insert_pending,
    int_or_none,
    receives_row,
    webhook_of,
)


class DeliveryQueue:
    _db: Database

    # -- the delivery side (actors) ----------------------------------------------------

    async def enabled(self) -> list[tuple[str, str]]:
        """(webhook id, org id) of every enabled subscription."""
        rows = await self._db.fetch(
            "SELECT id, org_id FROM webhooks WHERE enabled = :yes ORDER BY id", {"yes": True}
        )
        return [(r["id"], r["org_id"]) for r in rows]

    async def claim(self, webhook_id: str, owner: str, now: int, ttl_us: int) -> bool:
        """Take or renew the lease; False when another owner holds an unexpired one or the
        subscription is gone or disabled."""
        changed = await self._db.execute(
            "UPDATE webhooks SET lease_owner = :owner, lease_expires_at = :expires"
            " WHERE id = :id AND enabled = :yes"
            " AND (lease_owner IS NULL OR lease_owner = :owner OR lease_expires_at <= :now)",
            {"owner": owner, "expires": now + ttl_us, "id": webhook_id, "yes": True, "now": now},
        )
        return changed == 1

    async def release(self, webhook_id: str, owner: str) -> None:
        await self._db.execute(
            "UPDATE webhooks SET lease_owner = NULL, lease_expires_at = NULL"
            " WHERE id = :id AND lease_owner = :owner",
            {"id": webhook_id, "owner": owner},
        )

    async def fill_queue(self, webhook_id: str, owner: str, now: int, *, limit: int) -> int:
        """Copy the next outbox events it should receive into its queue and move its cursor
        past everything read (matching or not), in one transaction, as the lease owner.
        Reads at most `limit` events. Returns how many rows were queued; -1 when the lease is
        not held (or the subscription is disabled)."""
        async with self._db.transaction() as tx:
            # Lease check and row lock in one: a concurrent update() or fill waits for us.
            hook = await tx.fetchrow(
                f"UPDATE webhooks SET cursor_seq = cursor_seq WHERE {LEASED}"
                " RETURNING org_id, events, cursor_txid, cursor_seq",
                {"id": webhook_id, "yes": True, "owner": owner, "now": now},
            )
            if hook is None:
                return -1
            rows = await tx.fetch(
                "SELECT txid, seq, id, type, webhook_id FROM events"
                " WHERE org_id = :org_id AND (txid, seq) > (:ct, :cs)"
                f"{horizon(self._db)} ORDER BY txid, seq LIMIT :limit",
                {
                    "org_id": hook["org_id"],
                    "ct": int(hook["cursor_txid"]),
                    "cs": int(hook["cursor_seq"]),
                    "limit": limit,
                },
            )
            if not rows:
                return 0
            event_filter = tuple(json.loads(hook["events"]))
            wanted = [r["id"] for r in rows if receives_row(webhook_id, event_filter, r)]
            queued = 0
            if wanted:
                queued = await insert_pending(tx, webhook_id, wanted, now)
            last = rows[-1]
            await tx.execute(
                "UPDATE webhooks SET cursor_txid = :txid, cursor_seq = :seq WHERE id = :id",
                {"txid": int(last["txid"]), "seq": int(last["seq"]), "id": webhook_id},
            )
        return queued

    async def head(self, webhook_id: str) -> Delivery | None:
        """The pending delivery with the lowest position."""
        row = await self._db.fetchrow(
            f"{DELIVERY_SELECT} WHERE d.webhook_id = :id AND d.status = :pending"
            " ORDER BY d.position LIMIT 1",
            {"id": webhook_id, "pending": PENDING},
        )
        return None if row is None else delivery_of(row)

    async def record_attempt(
        self,
        webhook_id: str,
        owner: str,
        attempt: Attempt,
        *,
        status: str,
        next_attempt_at: int | None,
        now: int,
    ) -> bool:
        """Log the attempt and set the delivery's new status (pending with `next_attempt_at`,
        delivered, failed or dropped), as the lease owner. `dropped` also disables the
        subscription ("failing") and cancels what else is pending. False: lease not held, the
        subscription disabled, or the delivery no longer pending (it was cancelled meanwhile):
        nothing written."""
        async with self._db.transaction() as tx:
            held = await tx.execute(
                f"UPDATE webhooks SET lease_expires_at = lease_expires_at WHERE {LEASED}",
                {"id": webhook_id, "yes": True, "owner": owner, "now": now},
            )
            if not held:
                return False
            changed = await tx.execute(
                "UPDATE webhook_deliveries SET status = :status, attempts = attempts + 1,"
                " next_attempt_at = :next, last_status_code = :code, last_error = :error,"
                " updated_at = :now"
                " WHERE webhook_id = :id AND event_id = :event_id AND status = :pending",
                {
                    "status": status,
                    "next": next_attempt_at if status == PENDING else None,
                    "code": attempt.status_code,
                    "error": attempt.error,
                    "now": now,
                    "id": webhook_id,
                    "event_id": attempt.event_id,
                    "pending": PENDING,
                },
            )
            if not changed:
                return False  # nothing was written: the transaction holds no change
            await tx.execute(
                "INSERT INTO webhook_attempts (webhook_id, event_id, started_at, duration_ms,"
                " status_code, error, outcome) VALUES (:id, :event_id, :started, :duration,"
                " :code, :error, :outcome)",
                {
                    "id": webhook_id,
                    "event_id": attempt.event_id,
                    "started": attempt.started_at,
                    "duration": attempt.duration_ms,
                    "code": attempt.status_code,
                    "error": attempt.error,
                    "outcome": attempt.outcome,
                },
            )
            if status == DROPPED:
                await tx.execute(
                    "UPDATE webhooks SET enabled = :no, disabled_reason = :failing,"
                    " disabled_at = :now, updated_at = :now WHERE id = :id",
                    {"no": False, "failing": DISABLED_FAILING, "now": now, "id": webhook_id},
                )
                await cancel_pending(tx, webhook_id, now)
        return True

    async def outbox_head(self) -> tuple[int, int]:
        """The newest safely readable outbox position `(txid, seq)` (see "Order")."""
        row = await self._db.fetchrow(
            f"SELECT txid, seq FROM events WHERE 1 = 1{horizon(self._db)}"
            " ORDER BY txid DESC, seq DESC LIMIT 1"
        )
        return (0, 0) if row is None else (int(row["txid"]), int(row["seq"]))

    async def orgs_with_events_after(
        self, position: tuple[int, int], *, limit: int, orgs: Collection[str] | None = None
    ) -> tuple[set[str], tuple[int, int]]:
        """Orgs with outbox events past `position` that are safe to read, and the new
        position (to wake their subscriptions' actors). Reads at most `limit` events; with
        `orgs`, only theirs (the others' events are passed over)."""
        params: dict[str, object] = {"t": position[0], "s": position[1], "limit": limit}
        among = ""
        if orgs is not None:
            names = {f"o{i}": org for i, org in enumerate(sorted(orgs))}
            if not names:
                return set(), position
            among = f" AND org_id IN ({', '.join(':' + n for n in names)})"
            params.update(names)
        rows = await self._db.fetch(
            f"SELECT org_id, txid, seq FROM events WHERE (txid, seq) > (:t, :s){among}"
            f"{horizon(self._db)} ORDER BY txid, seq LIMIT :limit",
            params,
        )
        if not rows:
            return set(), position
        return {r["org_id"] for r in rows}, (int(rows[-1]["txid"]), int(rows[-1]["seq"]))

    async def queue_stats(self) -> list[QueueStats]:
        """Per enabled subscription: pending deliveries and the oldest one's queue time."""
        rows = await self._db.fetch(
            "SELECT w.id, w.org_id, COUNT(d.event_id) AS pending, MIN(d.created_at) AS oldest"
            " FROM webhooks w LEFT JOIN webhook_deliveries d"
            " ON d.webhook_id = w.id AND d.status = :pending"
            " WHERE w.enabled = :yes GROUP BY w.id, w.org_id ORDER BY w.id",
            {"pending": PENDING, "yes": True},
        )
        return [
            QueueStats(r["id"], r["org_id"], int(r["pending"]), int_or_none(r["oldest"]))
            for r in rows
        ]

    async def by_id(self, webhook_id: str) -> Webhook | None:
        """The subscription as its delivery actor needs it (secrets stay sealed: the actor
        opens them)."""
        row = await self._db.fetchrow(
            f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = :id", {"id": webhook_id}
        )
        return None if row is None else webhook_of(row)

    # -- the janitor -------------------------------------------------------------------

    async def purge(self, before: int, *, batch: int) -> int:
        """Delete up to `batch` attempts and finished deliveries (not pending) last changed
        before `before`, and outbox events created before it that no delivery row (of any
        status: the log shows each row with its event) refers to. Returns rows deleted (call
        again while it returns `batch` or more). Each delete is its own short statement."""
        params = {"before": before, "batch": batch, "pending": PENDING}
        deleted = await self._db.execute(
            "DELETE FROM webhook_attempts WHERE seq IN (SELECT seq FROM webhook_attempts"
            " WHERE started_at < :before ORDER BY seq LIMIT :batch)",
            params,
        )
        deleted += await self._db.execute(
            "DELETE FROM webhook_deliveries WHERE (webhook_id, event_id) IN"
            " (SELECT webhook_id, event_id FROM webhook_deliveries"
            " WHERE updated_at < :before AND status <> :pending LIMIT :batch)",
            params,
        )
        deleted += await self._db.execute(
            "DELETE FROM events WHERE seq IN (SELECT e.seq FROM events e"
            " WHERE e.created_at < :before AND NOT EXISTS"
            " (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id)"
            " ORDER BY e.seq LIMIT :batch)",
            params,
        )
        return deleted
