"""Files: their rows, and the storage quota they are charged against (migration 0007).

A file's row exists from the start of its upload, in status `uploading`, holding a quota
reservation (`charged_bytes`); the API never shows such a row. As the upload streams in, the
reservation grows (`reserve_more`); at the end `complete` sets it to the file's exact size and
the status to `processed`, or `abandon` removes the row and gives the reservation back. Every
change of a row's charge updates the org's `file_usage` counter in the same transaction, and a
reservation is taken by a conditional UPDATE (`bytes + n <= quota`), so uploads running at once
on any number of instances can never hold more than the quota together. A row left `uploading`
by a process that died is found by `stale_uploads` (its `updated_at` stops moving) and removed
by the files janitor.

Lookups hide expired files (`expires_at` passed) at once; the janitor deletes them later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from storage.database import Database, Executor, Row
from storage.errors import QuotaExceeded, StorageError
from storage.pages import Page

UPLOADING = "uploading"
PROCESSED = "processed"

_COLUMNS = (
    "id, org_id, purpose, filename, bytes, media_type, status, blob_key, data_key_sealed,"
    " charged_bytes, created_at, updated_at, expires_at"
)
_VISIBLE = "status = 'processed' AND (expires_at IS NULL OR expires_at > :now)"


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    org_id: str
    purpose: str
    filename: str
    bytes: int
    media_type: str
    status: str
    blob_key: str
    data_key_sealed: str
    charged_bytes: int
    created_at: int  # µs
    updated_at: int  # µs
    expires_at: int | None  # µs


@dataclass(frozen=True, slots=True)
class NewUpload:
    id: str
    org_id: str
    purpose: str
    filename: str
    blob_key: str
    data_key_sealed: str
    created_at: int
    owner: str | None = None  # the instance slot that uploads it (storage/instance_slot.py)


def _record(row: Row) -> FileRecord:
    return FileRecord(
        id=row["id"],
        org_id=row["org_id"],
        purpose=row["purpose"],
        filename=row["filename"],
        bytes=int(row["bytes"]),
        media_type=row["media_type"],
        status=row["status"],
        blob_key=row["blob_key"],
        data_key_sealed=row["data_key_sealed"],
        charged_bytes=int(row["charged_bytes"]),
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
        expires_at=None if row["expires_at"] is None else int(row["expires_at"]),
    )


async def _charge(tx: Executor, org_id: str, want: int, need: int, quota: int) -> int:
    """Add `want` bytes to the org's usage if that stays within `quota`, else `need` bytes
    (the least the caller can go on with); returns what was added. QuotaExceeded when not even
    `need` fits."""
    await tx.execute(
        "INSERT INTO file_usage (org_id, bytes) VALUES (:org, 0) ON CONFLICT (org_id) DO NOTHING",
        {"org": org_id},
    )
    for n in (want, need) if need < want else (need,):
        changed = await tx.execute(
            "UPDATE file_usage SET bytes = bytes + :n WHERE org_id = :org AND bytes + :n <= :quota",
            {"org": org_id, "n": n, "quota": quota},
        )
        if changed == 1:
            return n
    raise QuotaExceeded(quota)


async def _release(tx: Executor, org_id: str, n: int) -> None:
    if n:
        await tx.execute(
            "UPDATE file_usage SET bytes = bytes - :n WHERE org_id = :org",
            {"org": org_id, "n": n},
        )


class FileRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    # -- an upload ------------------------------------------------------------------------

    async def begin_upload(self, new: NewUpload, *, reserve: int, quota: int, need: int = 0) -> int:
        """Insert the `uploading` row holding `reserve` bytes of the quota, or `need` when the
        org has not that much room left (the upload then reserves as it goes); returns the
        bytes reserved. QuotaExceeded (and no row) when not even `need` fits."""
        async with self._db.transaction() as tx:
            reserve = await _charge(tx, new.org_id, reserve, need, quota)
            await tx.execute(
                f"INSERT INTO files ({_COLUMNS}, owner) VALUES (:id, :org_id, :purpose, :filename,"
                " 0, '', :status, :blob_key, :sealed, :reserve, :now, :now, NULL, :owner)",
                {
                    "id": new.id,
                    "org_id": new.org_id,
                    "purpose": new.purpose,
                    "filename": new.filename,
                    "status": UPLOADING,
                    "blob_key": new.blob_key,
                    "sealed": new.data_key_sealed,
                    "reserve": reserve,
                    "now": new.created_at,
                    "owner": new.owner,
                },
            )
        return reserve

    async def reserve_more(
        self, org_id: str, file_id: str, *, want: int, need: int, quota: int, now: int
    ) -> int:
        """Grow an upload's reservation by `want` bytes, or by `need` when the quota has no
        room for `want`; returns the growth. QuotaExceeded when not even `need` fits.
        StorageError if the upload's row is gone (the janitor judged it stale)."""
        async with self._db.transaction() as tx:
            more = await _charge(tx, org_id, want, need, quota)
            changed = await tx.execute(
                "UPDATE files SET charged_bytes = charged_bytes + :more, updated_at = :now"
                " WHERE org_id = :org AND id = :id AND status = :uploading",
                {"more": more, "now": now, "org": org_id, "id": file_id, "uploading": UPLOADING},
            )
            if changed != 1:
                raise StorageError(f"upload {file_id} is no longer in progress")
        return more

    async def touch(self, org_id: str, file_id: str, *, now: int) -> None:
        """The upload is still alive (so the janitor does not take it for a dead one)."""
        await self._db.execute(
            "UPDATE files SET updated_at = :now WHERE org_id = :org AND id = :id"
            " AND status = :uploading",
            {"now": now, "org": org_id, "id": file_id, "uploading": UPLOADING},
        )

    async def complete(
        self,
        org_id: str,
        file_id: str,
        *,
        size: int,
        media_type: str,
        purpose: str,
        expires_at: int | None,
        now: int,
    ) -> FileRecord:
        """The upload is stored and valid: charge exactly `size` (giving back the rest of the
        reservation) and make it `processed` (`purpose` may have come after the content in
        the form, so it is set here too). StorageError if its row is gone."""
        async with self._db.transaction() as tx:
            row = await tx.fetchrow(
                "SELECT charged_bytes FROM files WHERE org_id = :org AND id = :id"
                " AND status = :uploading",
                {"org": org_id, "id": file_id, "uploading": UPLOADING},
            )
            if row is None:
                raise StorageError(f"upload {file_id} is no longer in progress")
            reserved = int(row["charged_bytes"])
            if size > reserved:  # the caller reserves before it writes: a bug if reached
                raise StorageError(f"upload {file_id} wrote {size} bytes, reserved {reserved}")
            await _release(tx, org_id, reserved - size)
            updated = await tx.fetchrow(
                "UPDATE files SET status = :processed, bytes = :size, charged_bytes = :size,"
                " media_type = :media_type, purpose = :purpose, expires_at = :expires_at,"
                " updated_at = :now"
                f" WHERE org_id = :org AND id = :id RETURNING {_COLUMNS}",
                {
                    "processed": PROCESSED,
                    "size": size,
                    "media_type": media_type,
                    "purpose": purpose,
                    "expires_at": expires_at,
                    "now": now,
                    "org": org_id,
                    "id": file_id,
                },
            )
        assert updated is not None  # selected above, in this transaction
        return _record(updated)

    async def uploading(self, org_id: str, file_id: str) -> FileRecord | None:
        """An upload's row while it is in progress."""
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM files WHERE org_id = :org AND id = :id"
            " AND status = :uploading",
            {"org": org_id, "id": file_id, "uploading": UPLOADING},
        )
        return None if row is None else _record(row)

    async def abandon(self, org_id: str, file_id: str) -> bool:
        """Remove an unfinished upload's row and give its reservation back."""
        async with self._db.transaction() as tx:
            row = await tx.fetchrow(
                "DELETE FROM files WHERE org_id = :org AND id = :id AND status = :uploading"
                " RETURNING charged_bytes",
                {"org": org_id, "id": file_id, "uploading": UPLOADING},
            )
            if row is None:
                return False
            await _release(tx, org_id, int(row["charged_bytes"]))
            return True

    # -- the API --------------------------------------------------------------------------

    async def get(self, org_id: str, file_id: str, *, now: int) -> FileRecord | None:
        """The org's processed, unexpired file; None for anything else (another org's too)."""
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM files WHERE org_id = :org AND id = :id AND {_VISIBLE}",
            {"org": org_id, "id": file_id, "now": now},
        )
        return None if row is None else _record(row)

    async def list_for_org(
        self,
        org_id: str,
        *,
        purpose: str | None,
        limit: int,
        order: Literal["asc", "desc"],
        after: str | None,
        now: int,
    ) -> Page[FileRecord]:
        """By `created_at` (then id), `order`; `after` a file id of this org, or of one
        deleted since (its creation time is read from the ordered id); an unknown id: from the
        start."""
        where = f"org_id = :org AND {_VISIBLE}"
        params: dict[str, object] = {"org": org_id, "now": now, "limit": limit + 1}
        if purpose is not None:
            where += " AND purpose = :purpose"
            params["purpose"] = purpose
        start = None if after is None else await self._position(org_id, after)
        if start is not None:
            op = ">" if order == "asc" else "<"
            where += f" AND (created_at {op} :c OR (created_at = :c AND id {op} :after))"
            params.update(c=start, after=after)
        direction = "ASC" if order == "asc" else "DESC"
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM files WHERE {where}"
            f" ORDER BY created_at {direction}, id {direction} LIMIT :limit",
            params,
        )
        return Page([_record(r) for r in rows[:limit]], has_more=len(rows) > limit)

    async def _position(self, org_id: str, file_id: str) -> int | None:
        created = await self._db.fetchval(
            "SELECT created_at FROM files WHERE org_id = :org AND id = :id",
            {"org": org_id, "id": file_id},
        )
        return None if created is None else int(created)

    async def delete(self, org_id: str, file_id: str, *, now: int) -> FileRecord | None:
        """Delete the org's visible file and free its bytes; None if there is none. The data
        key goes with the row, so the blob is unreadable from here on even if deleting it
        fails (the caller deletes it next)."""
        async with self._db.transaction() as tx:
            row = await tx.fetchrow(
                f"DELETE FROM files WHERE org_id = :org AND id = :id AND {_VISIBLE}"
                f" RETURNING {_COLUMNS}",
                {"org": org_id, "id": file_id, "now": now},
            )
            if row is None:
                return None
            record = _record(row)
            await _release(tx, org_id, record.charged_bytes)
        return record

    async def usage(self, org_id: str) -> int:
        """Bytes the org holds against its quota: stored files plus uploads' reservations."""
        used = await self._db.fetchval(
            "SELECT bytes FROM file_usage WHERE org_id = :org", {"org": org_id}
        )
        return 0 if used is None else int(used)

    # -- the janitor ----------------------------------------------------------------------

    async def expired(self, *, now: int, limit: int) -> list[FileRecord]:
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM files WHERE expires_at <= :now AND status = :processed"
            " ORDER BY expires_at LIMIT :limit",
            {"now": now, "processed": PROCESSED, "limit": limit},
        )
        return [_record(r) for r in rows]

    async def stale_uploads(self, *, before: int, limit: int) -> list[FileRecord]:
        """Uploads whose row has not moved since `before`: their process died."""
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM files WHERE status = :uploading AND updated_at < :before"
            " ORDER BY updated_at LIMIT :limit",
            {"uploading": UPLOADING, "before": before, "limit": limit},
        )
        return [_record(r) for r in rows]

    async def leftovers(self, *, owner: str, before: int, limit: int) -> list[FileRecord]:
        """Uploads `owner` began before `before` (its start): an earlier run of the same
        instance slot, which is dead (storage/instance_slot.py), left them."""
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM files WHERE status = :uploading AND owner = :owner"
            " AND created_at < :before ORDER BY created_at LIMIT :limit",
            {"uploading": UPLOADING, "owner": owner, "before": before, "limit": limit},
        )
        return [_record(r) for r in rows]

    async def remove(self, record: FileRecord) -> bool:
        """Delete the row `record` was read from, whatever its status, and free its bytes;
        False if it changed or went meanwhile (another janitor, or the upload moved on)."""
        async with self._db.transaction() as tx:
            changed = await tx.execute(
                "DELETE FROM files WHERE org_id = :org AND id = :id AND status = :status"
                " AND charged_bytes = :charged AND updated_at = :updated",
                {
                    "org": record.org_id,
                    "id": record.id,
                    "status": record.status,
                    "charged": record.charged_bytes,
                    "updated": record.updated_at,
                },
            )
            if changed != 1:
                return False
            await _release(tx, record.org_id, record.charged_bytes)
            return True
