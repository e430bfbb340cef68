"""The durable events outbox: rows written in the same transaction as the change they report.

Delivery (webhooks) reads them later in `seq` order; nothing here sends anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from protocol.ids import new_id
from protocol.timefmt import now_us
from storage.database import Database, Executor


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    id: str
    org_id: str
    type: str
    data: dict[str, Any]
    created_at: int


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
            "data": json.dumps(data, separators=(",", ":")),
            "now": now_us(),
        },
    )
    return event_id


class EventRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

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
