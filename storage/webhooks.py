"""Webhook subscriptions, their delivery queues, leases and the delivery log.

Order. Each subscription reads the org's outbox (`events`) past its cursor in outbox order,
`(txid, seq)`. On SQLite `txid` is 0 and one writer at a time commits in `seq` order. On
PostgreSQL `seq` is taken at insert, not at commit, so a reader could see seq 11 before seq 10
commits; there `txid` is the writing transaction's id, and a reader only takes events whose
transaction is older than every transaction still running (`txid < xmin` of its snapshot): no
event can appear behind the cursor later. Transactions ordered this way respect causality (one
that committed before another began has the smaller id). A long-running transaction anywhere in
the PostgreSQL cluster holds delivery back while it runs.

Queue. Events that match the subscription's filter (or target it: test events) are copied into
`webhook_deliveries` as `pending`, up to a batch at a time, in the same transaction that moves
the cursor past them. The owner delivers the lowest `position` pending row, one at a time.
Strict order: a retrying event holds the events behind it (at most the retry schedule, ~31 h,
after which it is dropped and the subscription disabled).

Leases. A subscription's queue is delivered by the instance holding its lease (`lease_owner`
until `lease_expires_at`, wall-clock microseconds). Every write an owner makes is conditional on
still holding it, so an instance that lost its lease (paused, partitioned) changes nothing.

Statuses of a delivery: pending, delivered, failed (a permanent 4xx), dropped (every retry
failed), cancelled (the subscription was disabled or changed while it waited).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from protocol.ids import new_id
from protocol.timefmt import now_us
from protocol.webhooks import ALL, matches
from storage.database import Database, Executor, Row

PENDING = "pending"
DELIVERED = "delivered"
FAILED = "failed"
DROPPED = "dropped"
CANCELLED = "cancelled"

DISABLED_FAILING = "failing"
DISABLED_MANUAL = "manual"

T = TypeVar("T")


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


@dataclass(frozen=True, slots=True)
class Webhook:
    id: str
    org_id: str
    url: str
    events: tuple[str, ...]
    description: str | None
    enabled: bool
    secret_sealed: str
    secret_hint: str
    previous_secret_sealed: str | None
    previous_secret_expires_at: int | None
    disabled_reason: str | None
    disabled_at: int | None
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class NewWebhook:
    id: str  # whk_…, chosen by the caller (the secret is sealed with it as context)
    org_id: str
    url: str
    events: tuple[str, ...]
    description: str | None
    enabled: bool
    secret_sealed: str
    secret_hint: str


@dataclass(frozen=True, slots=True)
class Delivery:
    """A queued event of one subscription, with what is needed to send it."""

    webhook_id: str
    event_id: str
    event_type: str
    event_created_at: int
    data_json: str  # the stored `data`, embedded verbatim in the envelope
    position: int
    status: str
    attempts: int
    next_attempt_at: int | None
    last_status_code: int | None
    last_error: str | None
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class Attempt:
    event_id: str
    started_at: int
    duration_ms: int
    status_code: int | None
    error: str | None
    outcome: str  # delivered, retry, permanent


@dataclass(frozen=True, slots=True)
class QueueStats:
    webhook_id: str
    org_id: str
    pending: int
    oldest_pending_created_at: int | None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    has_more: bool


Position = tuple[int, int]  # (txid, seq): a place in the outbox order

_WEBHOOK_COLUMNS = (
    "id, org_id, url, events, description, enabled, secret_sealed, secret_hint,"
    " previous_secret_sealed, previous_secret_expires_at, disabled_reason, disabled_at,"
    " created_at, updated_at"
)
_DELIVERY_SELECT = (
    "SELECT d.webhook_id, d.event_id, e.type AS event_type, e.created_at AS event_created_at,"
    " e.data AS data_json, d.position, d.status, d.attempts, d.next_attempt_at,"
    " d.last_status_code, d.last_error, d.created_at, d.updated_at"
    " FROM webhook_deliveries d JOIN events e ON e.id = d.event_id"
)
# Statuses redeliver_since queues again (delivered and pending rows are left alone).
_REQUEUEABLE = (FAILED, DROPPED, CANCELLED)
# The lease condition every owner's write carries.
_LEASED = "id = :id AND enabled = :yes AND lease_owner = :owner AND lease_expires_at > :now"


def _horizon(db: Database) -> str:
    """The `AND …` that keeps a read to events no running transaction can still add to
    (module docstring, "Order"); computed in the reading statement, so from its snapshot."""
    if db.dialect == "postgresql":
        return " AND txid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
    return ""


def _webhook(row: Row) -> Webhook:
    return Webhook(
        id=row["id"],
        org_id=row["org_id"],
        url=row["url"],
        events=tuple(json.loads(row["events"])),
        description=row["description"],
        enabled=bool(row["enabled"]),
        secret_sealed=row["secret_sealed"],
        secret_hint=row["secret_hint"],
        previous_secret_sealed=row["previous_secret_sealed"],
        previous_secret_expires_at=_int_or_none(row["previous_secret_expires_at"]),
        disabled_reason=row["disabled_reason"],
        disabled_at=_int_or_none(row["disabled_at"]),
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
    )


def _delivery(row: Row) -> Delivery:
    return Delivery(
        webhook_id=row["webhook_id"],
        event_id=row["event_id"],
        event_type=row["event_type"],
        event_created_at=int(row["event_created_at"]),
        data_json=row["data_json"],
        position=int(row["position"]),
        status=row["status"],
        attempts=int(row["attempts"]),
        next_attempt_at=_int_or_none(row["next_attempt_at"]),
        last_status_code=_int_or_none(row["last_status_code"]),
        last_error=row["last_error"],
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
    )


def _attempt(row: Row) -> Attempt:
    return Attempt(
        event_id=row["event_id"],
        started_at=int(row["started_at"]),
        duration_ms=int(row["duration_ms"]),
        status_code=_int_or_none(row["status_code"]),
        error=row["error"],
        outcome=row["outcome"],
    )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _events_json(events: Sequence[str]) -> str:
    return json.dumps(list(events), separators=(",", ":"))


def _receives(webhook_id: str, event_filter: Sequence[str], row: Row) -> bool:
    """Whether the subscription gets this outbox event: targeted at it, or org-wide and
    matching its filter (an event targeted at another subscription: never)."""
    target = row["webhook_id"]
    if target is not None:
        return bool(target == webhook_id)
    return matches(event_filter, row["type"])


def _receives_sql(webhook_id: str, event_filter: Sequence[str]) -> tuple[str, dict[str, object]]:
    """`_receives` as a condition on `events e`, for reads that filter before a LIMIT."""
    params: dict[str, object] = {"rw": webhook_id}
    if tuple(event_filter[:1]) == (ALL,):
        return "(e.webhook_id = :rw OR e.webhook_id IS NULL)", params
    names = []
    for i, event_type in enumerate(event_filter):
        params[f"rt{i}"] = event_type
        names.append(f":rt{i}")
    types = ", ".join(names) if names else "NULL"
    return f"(e.webhook_id = :rw OR (e.webhook_id IS NULL AND e.type IN ({types})))", params


async def _org_head(tx: Executor, org_id: str) -> Position:
    """The newest committed event of the org: a cursor here skips everything written so far.
    (Not bounded by the horizon: an event whose transaction committed is behind it, however
    old the oldest running transaction is.)"""
    row = await tx.fetchrow(
        "SELECT txid, seq FROM events WHERE org_id = :org_id ORDER BY txid DESC, seq DESC LIMIT 1",
        {"org_id": org_id},
    )
    return (0, 0) if row is None else (int(row["txid"]), int(row["seq"]))


async def _next_position(tx: Executor, webhook_id: str) -> int:
    value = await tx.fetchval(
        "SELECT MAX(position) FROM webhook_deliveries WHERE webhook_id = :id", {"id": webhook_id}
    )
    return 1 if value is None else int(value) + 1


async def _cancel_pending(tx: Executor, webhook_id: str, now: int) -> None:
    await tx.execute(
        "UPDATE webhook_deliveries SET status = :cancelled, next_attempt_at = NULL,"
        " updated_at = :now WHERE webhook_id = :id AND status = :pending",
        {"cancelled": CANCELLED, "pending": PENDING, "now": now, "id": webhook_id},
    )


async def _requeue(tx: Executor, webhook_id: str, event_id: str, position: int, now: int) -> None:
    """Put the event at `position` of the queue, pending, due now, whether it had a row or not."""
    await tx.execute(
        "INSERT INTO webhook_deliveries (webhook_id, event_id, position, status, attempts,"
        " next_attempt_at, created_at, updated_at)"
        " VALUES (:id, :event_id, :position, :pending, 0, :now, :now, :now)"
        " ON CONFLICT (webhook_id, event_id) DO UPDATE SET position = :position,"
        " status = :pending, attempts = 0, next_attempt_at = :now, last_status_code = NULL,"
        " last_error = NULL, created_at = :now, updated_at = :now",
        {
            "id": webhook_id,
            "event_id": event_id,
            "position": position,
            "pending": PENDING,
            "now": now,
        },
    )


async def _get_delivery(executor: Executor, webhook_id: str, event_id: str) -> Delivery | None:
    row = await executor.fetchrow(
        f"{_DELIVERY_SELECT} WHERE d.webhook_id = :id AND d.event_id = :event_id",
        {"id": webhook_id, "event_id": event_id},
    )
    return None if row is None else _delivery(row)


class WebhookRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    # -- subscriptions (the API) -------------------------------------------------------

    async def create(self, new: NewWebhook, now: int) -> Webhook:
        """Insert it with the cursor at the org's outbox head: it gets events written after.
        Created disabled (`enabled` false), its `disabled_reason` is "manual"."""
        async with self._db.transaction() as tx:
            txid, seq = await _org_head(tx, new.org_id)
            await tx.execute(
                "INSERT INTO webhooks (id, org_id, url, events, description, enabled,"
                " secret_sealed, secret_hint, cursor_txid, cursor_seq, created_at, updated_at)"
                " VALUES (:id, :org_id, :url, :events, :description, :enabled, :sealed, :hint,"
                " :txid, :seq, :now, :now)",
                {
                    "id": new.id,
                    "org_id": new.org_id,
                    "url": new.url,
                    "events": _events_json(new.events),
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
            created = await _get(tx, new.org_id, new.id)
        assert created is not None  # inserted just now, in this transaction
        return created

    async def get(self, org_id: str, webhook_id: str) -> Webhook | None:
        return await _get(self._db, org_id, webhook_id)

    async def list_for_org(self, org_id: str, *, limit: int, after: str | None) -> Page[Webhook]:
        """Oldest first; `after` a webhook id of this org (an unknown id: from the start)."""
        start = await _get(self._db, org_id, after) if after is not None else None
        params: dict[str, object] = {"org_id": org_id, "limit": limit + 1}
        where = "org_id = :org_id"
        if start is not None:
            where += " AND (created_at > :c OR (created_at = :c AND id > :after))"
            params.update(c=start.created_at, after=start.id)
        rows = await self._db.fetch(
            f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE {where}"
            " ORDER BY created_at, id LIMIT :limit",
            params,
        )
        return Page([_webhook(r) for r in rows[:limit]], has_more=len(rows) > limit)

    async def update(
        self,
        org_id: str,
        webhook_id: str,
        now: int,
        *,
        url: str | _Unset = UNSET,
        events: tuple[str, ...] | _Unset = UNSET,
        description: str | None | _Unset = UNSET,
        enabled: bool | _Unset = UNSET,
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
                f" RETURNING {_WEBHOOK_COLUMNS}",
                {"now": now, "id": webhook_id, "org_id": org_id},
            )
            if row is None:
                return None
            current = _webhook(row)
            sets: dict[str, object] = {}
            if not isinstance(url, _Unset):
                sets["url"] = url
            if not isinstance(description, _Unset):
                sets["description"] = description
            restart = False
            if not isinstance(events, _Unset) and tuple(events) != current.events:
                sets["events"] = _events_json(events)
                restart = True
            if not isinstance(enabled, _Unset) and enabled != current.enabled:
                sets["enabled"] = enabled
                if enabled:
                    sets.update(disabled_reason=None, disabled_at=None)
                    restart = True
                else:
                    sets.update(disabled_reason=DISABLED_MANUAL, disabled_at=now)
                    await _cancel_pending(tx, webhook_id, now)
            if restart:
                sets["cursor_txid"], sets["cursor_seq"] = await _org_head(tx, org_id)
                await _cancel_pending(tx, webhook_id, now)
            if sets:
                assignments = ", ".join(f"{column} = :{column}" for column in sets)
                await tx.execute(
                    f"UPDATE webhooks SET {assignments} WHERE id = :id",
                    {**sets, "id": webhook_id},
                )
            return await _get(tx, org_id, webhook_id)

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
            return await _get(tx, org_id, webhook_id) if changed else None

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
        if await _get(self._db, org_id, webhook_id) is None:
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
            f"{_DELIVERY_SELECT} WHERE {where} ORDER BY d.position DESC LIMIT :limit", params
        )
        page = [_delivery(r) for r in rows[:limit]]
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
                attempts[row["event_id"]].append(_attempt(row))
        return Page([(d, attempts[d.event_id]) for d in page], has_more=len(rows) > limit)

    async def redeliver(
        self, org_id: str, webhook_id: str, event_id: str, now: int
    ) -> Delivery | None:
        """Queue the event again at the tail: pending, attempts 0, due now. The event must be
        one this subscription would receive (in its log, or in the org's outbox and matching
        its filter); None otherwise."""
        async with self._db.transaction() as tx:
            hook = await _lock(tx, org_id, webhook_id)
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
                if event is None or not _receives(webhook_id, hook.events, event):
                    return None
            await _requeue(tx, webhook_id, event_id, await _next_position(tx, webhook_id), now)
            return await _get_delivery(tx, webhook_id, event_id)

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
            receives, params = _receives_sql(webhook_id, json.loads(row["events"]))
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
                    "s0": _REQUEUEABLE[0],
                    "s1": _REQUEUEABLE[1],
                    "s2": _REQUEUEABLE[2],
                    "limit": limit,
                },
            )
            position = await _next_position(tx, webhook_id)
            for offset, event in enumerate(found):
                await _requeue(tx, webhook_id, event["id"], position + offset, now)
        return len(found)

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
                f"UPDATE webhooks SET cursor_seq = cursor_seq WHERE {_LEASED}"
                " RETURNING org_id, events, cursor_txid, cursor_seq",
                {"id": webhook_id, "yes": True, "owner": owner, "now": now},
            )
            if hook is None:
                return -1
            rows = await tx.fetch(
                "SELECT txid, seq, id, type, webhook_id FROM events"
                " WHERE org_id = :org_id AND (txid, seq) > (:ct, :cs)"
                f"{_horizon(self._db)} ORDER BY txid, seq LIMIT :limit",
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
            wanted = [r["id"] for r in rows if _receives(webhook_id, event_filter, r)]
            queued = 0
            if wanted:
                queued = await _insert_pending(tx, webhook_id, wanted, now)
            last = rows[-1]
            await tx.execute(
                "UPDATE webhooks SET cursor_txid = :txid, cursor_seq = :seq WHERE id = :id",
                {"txid": int(last["txid"]), "seq": int(last["seq"]), "id": webhook_id},
            )
        return queued

    async def head(self, webhook_id: str) -> Delivery | None:
        """The pending delivery with the lowest position."""
        row = await self._db.fetchrow(
            f"{_DELIVERY_SELECT} WHERE d.webhook_id = :id AND d.status = :pending"
            " ORDER BY d.position LIMIT 1",
            {"id": webhook_id, "pending": PENDING},
        )
        return None if row is None else _delivery(row)

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
                f"UPDATE webhooks SET lease_expires_at = lease_expires_at WHERE {_LEASED}",
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
                await _cancel_pending(tx, webhook_id, now)
        return True

    async def outbox_head(self) -> tuple[int, int]:
        """The newest safely readable outbox position `(txid, seq)` (see "Order")."""
        row = await self._db.fetchrow(
            f"SELECT txid, seq FROM events WHERE 1 = 1{_horizon(self._db)}"
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
            f"{_horizon(self._db)} ORDER BY txid, seq LIMIT :limit",
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
            QueueStats(r["id"], r["org_id"], int(r["pending"]), _int_or_none(r["oldest"]))
            for r in rows
        ]

    async def by_id(self, webhook_id: str) -> Webhook | None:
        """The subscription as its delivery actor needs it (secrets stay sealed: the actor
        opens them)."""
        row = await self._db.fetchrow(
            f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE id = :id", {"id": webhook_id}
        )
        return None if row is None else _webhook(row)

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


async def _get(executor: Executor, org_id: str, webhook_id: str) -> Webhook | None:
    row = await executor.fetchrow(
        f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE id = :id AND org_id = :org_id",
        {"id": webhook_id, "org_id": org_id},
    )
    return None if row is None else _webhook(row)


async def _lock(tx: Executor, org_id: str, webhook_id: str) -> Webhook | None:
    """The org's subscription, its row locked (PostgreSQL) until the transaction ends."""
    row = await tx.fetchrow(
        "UPDATE webhooks SET cursor_seq = cursor_seq WHERE id = :id AND org_id = :org_id"
        f" RETURNING {_WEBHOOK_COLUMNS}",
        {"id": webhook_id, "org_id": org_id},
    )
    return None if row is None else _webhook(row)


_INSERT_CHUNK = 500  # events per INSERT statement: two parameters each, far below the limits


async def _insert_pending(tx: Executor, webhook_id: str, event_ids: list[str], now: int) -> int:
    """Append the events to the queue, in order; one already in its log (redelivered before
    the cursor reached it) keeps its row. Returns how many were added."""
    position = await _next_position(tx, webhook_id)
    added = 0
    for start in range(0, len(event_ids), _INSERT_CHUNK):
        chunk = event_ids[start : start + _INSERT_CHUNK]
        params: dict[str, object] = {"id": webhook_id, "pending": PENDING, "now": now}
        values = []
        for i, event_id in enumerate(chunk):
            params[f"e{i}"], params[f"p{i}"] = event_id, position + start + i
            values.append(f"(:id, :e{i}, :p{i}, :pending, 0, :now, :now, :now)")
        added += await tx.execute(
            "INSERT INTO webhook_deliveries (webhook_id, event_id, position, status, attempts,"
            f" next_attempt_at, created_at, updated_at) VALUES {', '.join(values)}"
            " ON CONFLICT (webhook_id, event_id) DO NOTHING",
            params,
        )
    return added
