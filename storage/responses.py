"""Stored responses (migration 0010): one self-contained row per response, found by id within
its organization while unexpired. Lookups hide expired rows at once; the responses janitor
deletes them later (actors/responses_janitor.py). Holds only sealed and encrypted values:
sealing is the caller's (services/responses.py)."""

from __future__ import annotations

from dataclasses import dataclass

from storage.database import Database, Row

_COLUMNS = "id, org_id, model, data_key_sealed, content_encrypted, created_at, expires_at"


@dataclass(frozen=True, slots=True)
class ResponseRecord:
    id: str
    org_id: str
    model: str
    data_key_sealed: str
    content_encrypted: str
    created_at: int  # µs
    expires_at: int  # µs

    def __repr__(self) -> str:
        return f"ResponseRecord(id={self.id!r}, org_id={self.org_id!r}, content=***)"


def _record(row: Row) -> ResponseRecord:
    return ResponseRecord(
        id=row["id"],
        org_id=row["org_id"],
        model=row["model"],
        data_key_sealed=row["data_key_sealed"],
        content_encrypted=row["content_encrypted"],
        created_at=int(row["created_at"]),
        expires_at=int(row["expires_at"]),
    )


class ResponseRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def insert(self, record: ResponseRecord) -> None:
        """One autocommitted write: the row is readable on every instance once this returns."""
        await self._db.execute(
            f"INSERT INTO responses ({_COLUMNS}) VALUES (:id, :org_id, :model, :sealed,"
            " :content, :created_at, :expires_at)",
            {
                "id": record.id,
                "org_id": record.org_id,
                "model": record.model,
                "sealed": record.data_key_sealed,
                "content": record.content_encrypted,
                "created_at": record.created_at,
                "expires_at": record.expires_at,
            },
        )

    async def get(self, org_id: str, response_id: str, *, now: int) -> ResponseRecord | None:
        """The organization's response while unexpired; None otherwise (another org's id
        included: it is not told apart from an unknown one)."""
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM responses"
            " WHERE id = :id AND org_id = :org AND expires_at > :now",
            {"id": response_id, "org": org_id, "now": now},
        )
        return None if row is None else _record(row)

    async def delete(self, org_id: str, response_id: str, *, now: int) -> bool:
        """Remove the organization's unexpired response; False if there was none."""
        changed = await self._db.execute(
            "DELETE FROM responses WHERE id = :id AND org_id = :org AND expires_at > :now",
            {"id": response_id, "org": org_id, "now": now},
        )
        return changed == 1

    async def remove_expired(self, *, now: int, limit: int) -> int:
        """Delete up to `limit` expired rows (oldest expiry first); how many went."""
        return await self._db.execute(
            "DELETE FROM responses WHERE id IN (SELECT id FROM responses"
            " WHERE expires_at <= :now ORDER BY expires_at LIMIT :limit)",
            {"now": now, "limit": limit},
        )

    async def count(self) -> int:
        """Rows, expired or not (for tests and statistics)."""
        return int(await self._db.fetchval("SELECT COUNT(*) FROM responses", {}) or 0)
