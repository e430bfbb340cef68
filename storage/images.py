"""Generated images served by URL (migration 0009): one row per image, found by the hash of
its URL token while unexpired. Lookups hide expired rows at once; the files janitor deletes
them (and their blobs) later (actors/files_janitor.py)."""

from __future__ import annotations

from dataclasses import dataclass

from storage.database import Database, Row

_COLUMNS = (
    "id, org_id, token_hash, blob_key, data_key_sealed, bytes, media_type, created_at, expires_at"
)


@dataclass(frozen=True, slots=True)
class ImageRecord:
    id: str
    org_id: str
    token_hash: str
    blob_key: str
    data_key_sealed: str
    bytes: int
    media_type: str
    created_at: int  # µs
    expires_at: int  # µs


def _record(row: Row) -> ImageRecord:
    return ImageRecord(
        id=row["id"],
        org_id=row["org_id"],
        token_hash=row["token_hash"],
        blob_key=row["blob_key"],
        data_key_sealed=row["data_key_sealed"],
        bytes=int(row["bytes"]),
        media_type=row["media_type"],
        created_at=int(row["created_at"]),
        expires_at=int(row["expires_at"]),
    )


class ImageRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def insert(self, record: ImageRecord) -> None:
        """After its blob is written: a row points only at content that exists."""
        await self._db.execute(
            f"INSERT INTO images ({_COLUMNS}) VALUES (:id, :org_id, :token_hash, :blob_key,"
            " :sealed, :bytes, :media_type, :created_at, :expires_at)",
            {
                "id": record.id,
                "org_id": record.org_id,
                "token_hash": record.token_hash,
                "blob_key": record.blob_key,
                "sealed": record.data_key_sealed,
                "bytes": record.bytes,
                "media_type": record.media_type,
                "created_at": record.created_at,
                "expires_at": record.expires_at,
            },
        )

    async def by_token(self, token_hash: str, *, now: int) -> ImageRecord | None:
        """The image of a URL token while it has not expired; None otherwise."""
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM images WHERE token_hash = :hash AND expires_at > :now",
            {"hash": token_hash, "now": now},
        )
        return None if row is None else _record(row)

    async def expired(self, *, now: int, limit: int) -> list[ImageRecord]:
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM images WHERE expires_at <= :now"
            " ORDER BY expires_at LIMIT :limit",
            {"now": now, "limit": limit},
        )
        return [_record(r) for r in rows]

    async def remove(self, record: ImageRecord) -> bool:
        """Delete the row; False if another janitor took it first."""
        changed = await self._db.execute("DELETE FROM images WHERE id = :id", {"id": record.id})
        return changed == 1

    async def count(self) -> int:
        """Rows, expired or not (for tests and statistics)."""
        return int(await self._db.fetchval("SELECT COUNT(*) FROM images", {}) or 0)
