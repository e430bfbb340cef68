"""The operator console's sessions (migration 0025): one row per signed-in browser, shared by
every instance and worker on the database, so a request may land anywhere and a restart signs
nobody out.

Rows are found by the SHA-256 of the cookie's id, never by the id. What a row means (expiry,
the operator key or management key it is bound to, the sealed flash messages) is the console's
(gateway/console/sessions.py): this module stores and returns it. Times are wall-clock µs,
passed in by the caller, so that tests choose them.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.database import Database, Row

_COLUMNS = "id_hash, operator_key, org_id, key_hash, label, flash_box, created_at, seen_at"


@dataclass(frozen=True, slots=True)
class StoredSession:
    id_hash: str  # hex SHA-256 of the cookie's id
    operator_key: str | None  # fingerprint of the operator key (an operator session)
    org_id: str | None  # an organization's session: its org ...
    key_hash: str | None  # ... and the stored hash of the management key it signed in with
    label: str
    flash_box: str  # sealed flash messages; '' for none
    created_at: int  # µs
    seen_at: int  # µs, updated at most every minute or so (the console's TOUCH_S)


def _session(row: Row) -> StoredSession:
    return StoredSession(
        id_hash=row["id_hash"],
        operator_key=row["operator_key"],
        org_id=row["org_id"],
        key_hash=row["key_hash"],
        label=row["label"],
        flash_box=row["flash_box"],
        created_at=int(row["created_at"]),
        seen_at=int(row["seen_at"]),
    )


class ConsoleSessionRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, session: StoredSession) -> None:
        await self._db.execute(
            f"INSERT INTO console_sessions ({_COLUMNS}) VALUES (:id_hash, :operator_key,"
            " :org_id, :key_hash, :label, :flash_box, :created_at, :seen_at)",
            {
                "id_hash": session.id_hash,
                "operator_key": session.operator_key,
                "org_id": session.org_id,
                "key_hash": session.key_hash,
                "label": session.label,
                "flash_box": session.flash_box,
                "created_at": session.created_at,
                "seen_at": session.seen_at,
            },
        )

    async def get(self, id_hash: str) -> StoredSession | None:
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM console_sessions WHERE id_hash = :h", {"h": id_hash}
        )
        return None if row is None else _session(row)

    async def touch(self, id_hash: str, now: int, *, unless_since: int) -> bool:
        """Set the session's last-seen time to `now` unless it was seen at or after
        `unless_since` already (another request, maybe on another instance, did it)."""
        changed = await self._db.execute(
            "UPDATE console_sessions SET seen_at = :now WHERE id_hash = :h AND seen_at < :since",
            {"now": now, "h": id_hash, "since": unless_since},
        )
        return changed > 0

    async def swap_flash(self, id_hash: str, expected: str, replacement: str) -> bool:
        """Replace the sealed flash messages if they are still `expected` (compare-and-set:
        two requests of one session adding or taking messages at once lose none)."""
        changed = await self._db.execute(
            "UPDATE console_sessions SET flash_box = :new WHERE id_hash = :h AND flash_box = :old",
            {"new": replacement, "h": id_hash, "old": expected},
        )
        return changed > 0

    async def end(self, id_hash: str) -> bool:
        return (
            await self._db.execute(
                "DELETE FROM console_sessions WHERE id_hash = :h", {"h": id_hash}
            )
            > 0
        )

    async def purge(self, *, seen_before: int, created_before: int) -> int:
        """Delete the sessions idle since before `seen_before` or signed in before
        `created_before`; answers how many."""
        return await self._db.execute(
            "DELETE FROM console_sessions WHERE seen_at < :seen OR created_at < :created",
            {"seen": seen_before, "created": created_before},
        )

    async def count(self) -> int:
        return int(await self._db.fetchval("SELECT COUNT(*) FROM console_sessions"))
