"""The durable events outbox: rows written in the same transaction as the change they report.

Events of requests that failed without a charge carry what the hourly usage counts them under
(`NewEvent.failed`): a batch writes their counts with them (storage/usage.py).

Delivery (webhooks) reads them later in outbox order, `(txid, seq)` (storage/webhooks/);
nothing here sends anything. `data` is stored as compact JSON text (msgspec: a few times faster
than `json.dumps`, which matters for the hot path's batches) and sent verbatim.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from protocol.ids import new_id
from protocol.timefmt import now_us
from storage.database import Database, Executor
from storage.usage import FailedRequest, add_failures


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    id: str
    org_id: str
    type: str
    data: dict[str, Any]
    created_at: int


def encode_data(data: dict[str, Any]) -> str:
    return _encode(data).decode()


_encode = msgspec.json.encode


async def append(tx: Executor, org_id: str, type: str, data: dict[str, Any]) -> str:
    """Add an event inside the caller's transaction; returns its `evt_…` id."""
    event_id = new_id("evt")
    await tx.execute(
        "INSERT INTO events (id, org_id, type, data, created_at)"
        " VALUES (:id, :org_id, :type, :data, :now)",
        {
            "id": event_id,
            "org_id": org_id,
            "type": type,
            "data": encode_data(data),
            "now": now_us(),
        },
    )
    return event_id


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event made on the hot path and written later in a batch (actors/event_writer.py):
    its id and time are fixed when it happens, so a retried batch recognises its rows."""

    id: str
    org_id: str
    type: str
    data: dict[str, Any]
    created_at: int
    # A `completion.error` event's request, counted as a failed request in the hourly usage
    # (storage/usage.py) in the transaction that writes the event (or its charge's).
    failed: FailedRequest | None = None


def new_event(
    org_id: str, type: str, data: dict[str, Any], *, failed: FailedRequest | None = None
) -> NewEvent:
    return NewEvent(new_id("evt"), org_id, type, data, now_us(), failed)


_COLUMNS = ("id", "org_id", "type", "data", "created_at")


async def append_many(tx: Executor, batch: Sequence[NewEvent]) -> None:
    """Add `batch` inside the caller's transaction, in one bulk insert (in order: `seq`
    follows the batch)."""
    rows = [(e.id, e.org_id, e.type, encode_data(e.data), e.created_at) for e in batch]
    await tx.insert_many("events", _COLUMNS, rows)


class EventRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def write_batch(self, batch: Sequence[NewEvent], *, skip_stored: bool = False) -> int:
        """Write `batch` in one transaction; returns how many rows were inserted. `skip_stored`
        (a retry after a failure whose outcome is unknown) leaves out events whose ids are
        stored already, so none is written twice."""
        if not batch:
            return 0
        async with self._db.transaction() as tx:
            if skip_stored:
                names = {f"e{i}": e.id for i, e in enumerate(batch)}
                rows = await tx.fetch(
                    f"SELECT id FROM events WHERE id IN ({', '.join(':' + n for n in names)})",
                    names,
                )
                stored = {r["id"] for r in rows}
                batch = [e for e in batch if e.id not in stored]
            if batch:
                await append_many(tx, batch)
                await add_failures(tx, batch)
        return len(batch)

    async def list_for_org(
        self, org_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[Event]:
        rows = await self._db.fetch(
            "SELECT seq, id, org_id, type, data, created_at FROM events"
            " WHERE org_id = :org_id AND seq > :after ORDER BY seq LIMIT :limit",
            {"org_id": org_id, "after": after_seq, "limit": limit},
        )
        return [
            Event(
                seq=int(r["seq"]),
                id=r["id"],
                org_id=r["org_id"],
                type=r["type"],
                data=json.loads(r["data"]),
                created_at=int(r["created_at"]),
            )
            for r in rows
        ]
