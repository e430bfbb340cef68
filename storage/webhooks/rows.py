"""Row mapping and the statements the subscription and queue sides share (package-private)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from protocol.webhooks import ALL, matches
from storage.database import Database, Executor, Row
from storage.webhooks.records import (
    CANCELLED,
    DELIVERY_SELECT,
    PENDING,
    WEBHOOK_COLUMNS,
    Attempt,
    Delivery,
    Position,
    Webhook,
)


def horizon(db: Database) -> str:
    """The `AND …` that keeps a read to events no running transaction can still add to
    (module docstring, "Order"); computed in the reading statement, so from its snapshot."""
    if db.dialect == "postgresql":
        return " AND txid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
    return ""


def webhook_of(row: Row) -> Webhook:
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
        previous_secret_expires_at=int_or_none(row["previous_secret_expires_at"]),
        disabled_reason=row["disabled_reason"],
        disabled_at=int_or_none(row["disabled_at"]),
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
    )


def delivery_of(row: Row) -> Delivery:
    return Delivery(
        webhook_id=row["webhook_id"],
        event_id=row["event_id"],
        event_type=row["event_type"],
        event_created_at=int(row["event_created_at"]),
        data_json=row["data_json"],
        position=int(row["position"]),
        status=row["status"],
        attempts=int(row["attempts"]),
        next_attempt_at=int_or_none(row["next_attempt_at"]),
        last_status_code=int_or_none(row["last_status_code"]),
        last_error=row["last_error"],
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
    )


def attempt_of(row: Row) -> Attempt:
    return Attempt(
        event_id=row["event_id"],
        started_at=int(row["started_at"]),
        duration_ms=int(row["duration_ms"]),
        status_code=int_or_none(row["status_code"]),
        error=row["error"],
        outcome=row["outcome"],
    )


def int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def events_json(events: Sequence[str]) -> str:
    return json.dumps(list(events), separators=(",", ":"))


def receives_row(webhook_id: str, event_filter: Sequence[str], row: Row) -> bool:
    """Whether the subscription gets this outbox event: targeted at it, or org-wide and
    matching its filter (an event targeted at another subscription: never)."""
    target = row["webhook_id"]
    if target is not None:
        return bool(target == webhook_id)
    return matches(event_filter, row["type"])


def receives_sql(webhook_id: str, event_filter: Sequence[str]) -> tuple[str, dict[str, object]]:
    """`receives_row` as a condition on `events e`, for reads that filter before a LIMIT."""
    params: dict[str, object] = {"rw": webhook_id}
    if tuple(event_filter[:1]) == (ALL,):
        return "(e.webhook_id = :rw OR e.webhook_id IS NULL)", params
    names = []
    for i, event_type in enumerate(event_filter):
        params[f"rt{i}"] = event_type
        names.append(f":rt{i}")
    types = ", ".join(names) if names else "NULL"
    return f"(e.webhook_id = :rw OR (e.webhook_id IS NULL AND e.type IN ({types})))", params


async def org_head(tx: Executor, org_id: str) -> Position:
    """The newest committed event of the org: a cursor here skips everything written so far.
    (Not bounded by the horizon: an event whose transaction committed is behind it, however
    old the oldest running transaction is.)"""
    row = await tx.fetchrow(
        "SELECT txid, seq FROM events WHERE org_id = :org_id ORDER BY txid DESC, seq DESC LIMIT 1",
        {"org_id": org_id},
    )
    return (0, 0) if row is None else (int(row["txid"]), int(row["seq"]))


async def next_position(tx: Executor, webhook_id: str) -> int:
    value = await tx.fetchval(
        "SELECT MAX(position) FROM webhook_deliveries WHERE webhook_id = :id", {"id": webhook_id}
    )
    return 1 if value is None else int(value) + 1


async def cancel_pending(tx: Executor, webhook_id: str, now: int) -> None:
    await tx.execute(
        "UPDATE webhook_deliveries SET status = :cancelled, next_attempt_at = NULL,"
        " updated_at = :now WHERE webhook_id = :id AND status = :pending",
        {"cancelled": CANCELLED, "pending": PENDING, "now": now, "id": webhook_id},
    )


async def requeue(tx: Executor, webhook_id: str, event_id: str, position: int, now: int) -> None:
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


async def get_delivery(executor: Executor, webhook_id: str, event_id: str) -> Delivery | None:
    row = await executor.fetchrow(
        f"{DELIVERY_SELECT} WHERE d.webhook_id = :id AND d.event_id = :event_id",
        {"id": webhook_id, "event_id": event_id},
    )
    return None if row is None else delivery_of(row)


async def get_webhook(executor: Executor, org_id: str, webhook_id: str) -> Webhook | None:
    row = await executor.fetchrow(
        f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = :id AND org_id = :org_id",
        {"id": webhook_id, "org_id": org_id},
    )
    return None if row is None else webhook_of(row)


async def lock_webhook(tx: Executor, org_id: str, webhook_id: str) -> Webhook | None:
    """The org's subscription, its row locked (PostgreSQL) until the transaction ends."""
    row = await tx.fetchrow(
        "UPDATE webhooks SET cursor_seq = cursor_seq WHERE id = :id AND org_id = :org_id"
        f" RETURNING {WEBHOOK_COLUMNS}",
        {"id": webhook_id, "org_id": org_id},
    )
    return None if row is None else webhook_of(row)


INSERT_CHUNK = 500  # events per INSERT statement: two parameters each, far below the limits


async def insert_pending(tx: Executor, webhook_id: str, event_ids: list[str], now: int) -> int:
    """Append the events to the queue, in order; one already in its log (redelivered before
    the cursor reached it) keeps its row. Returns how many were added."""
    position = await next_position(tx, webhook_id)
    added = 0
    for start in range(0, len(event_ids), INSERT_CHUNK):
        chunk = event_ids[start : start + INSERT_CHUNK]
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
