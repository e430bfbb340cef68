"""The keyring row and the sealed columns a master-key rotation re-seals.

Holds only sealed values and key ids (protocol/keyring.py): sealing and opening are the
caller's. The keyring is one row (id 1). A rotation marks itself in it first (the id of the key
it goes to), re-seals the other tables' sealed columns a batch at a time, and ends by swapping the
pepper's sealed form and the key id in one conditional update (gateway/keyring/rotate.py).

`SEALED_COLUMNS` names every column sealed under the master key, with what its context is made
of: a new sealed column must be added there, or a rotation would leave it under the old key
(tests/storage/test_keyring.py checks the list against the schema).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from protocol.secretbox import FILE_KEYS, MIRROR_ANSWERS, PROVIDER_KEYS, WEBHOOK_SECRETS
from protocol.timefmt import now_us
from storage.database import Database, Row

_ROW_ID = 1
_COLUMNS = (
    "master_key_id, pepper_sealed, master_key_created_at, next_master_key_id, rotation_started_at"
)


@dataclass(frozen=True, slots=True)
class KeyringRecord:
    master_key_id: str
    pepper_sealed: str
    master_key_created_at: int  # µs
    next_master_key_id: str | None  # set while a rotation is under way
    rotation_started_at: int | None

    def __repr__(self) -> str:
        return f"KeyringRecord(master_key_id={self.master_key_id!r}, pepper_sealed=***)"


def _record(row: Row) -> KeyringRecord:
    return KeyringRecord(
        master_key_id=row["master_key_id"],
        pepper_sealed=row["pepper_sealed"],
        master_key_created_at=int(row["master_key_created_at"]),
        next_master_key_id=row["next_master_key_id"],
        rotation_started_at=row["rotation_started_at"],
    )


@dataclass(frozen=True, slots=True)
class SealedColumns:
    """A table's columns sealed under the master key. Each is sealed with the SecretBox
    `purpose` and the context made of the row's `context` columns, in order."""

    table: str
    purpose: str
    columns: tuple[str, ...]
    context: tuple[str, ...]


SEALED_COLUMNS = (
    SealedColumns("provider_keys", PROVIDER_KEYS, ("sealed_key",), ("org_id", "provider")),
    SealedColumns(
        "webhooks", WEBHOOK_SECRETS, ("secret_sealed", "previous_secret_sealed"), ("org_id", "id")
    ),
    SealedColumns("files", FILE_KEYS, ("data_key_sealed",), ("org_id", "id")),
    # Generated images (storage/images.py): the same purpose as files, their own ids (img_).
    SealedColumns("images", FILE_KEYS, ("data_key_sealed",), ("org_id", "id")),
    # Stored responses (storage/responses.py): each row's data key, as files'; the content,
    # encrypted under that key, is not touched by a rotation.
    SealedColumns("responses", FILE_KEYS, ("data_key_sealed",), ("org_id", "id")),
    # Shadow models' answers (storage/mirror_results.py), sealed whole: they are small.
    SealedColumns("mirror_results", MIRROR_ANSWERS, ("shadow_answer_sealed",), ("org_id", "id")),
)


class KeyringRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self) -> KeyringRecord | None:
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM keyring WHERE id = :id", {"id": _ROW_ID}
        )
        return None if row is None else _record(row)

    async def create(self, master_key_id: str, pepper_sealed: str) -> KeyringRecord:
        """The keyring of a database that had none; if another instance created it meanwhile,
        that one (the caller checks its key against it as against any)."""
        now = now_us()
        await self._db.execute(
            "INSERT INTO keyring (id, master_key_id, pepper_sealed, master_key_created_at,"
            " updated_at) VALUES (:id, :key_id, :sealed, :now, :now) ON CONFLICT (id) DO NOTHING",
            {"id": _ROW_ID, "key_id": master_key_id, "sealed": pepper_sealed, "now": now},
        )
        record = await self.get()
        assert record is not None
        return record

    async def begin_rotation(self, master_key_id: str, next_master_key_id: str) -> bool:
        """Mark a rotation from the current key to the next; False if the keyring is not under
        `master_key_id` any more or another rotation (to another key) is under way."""
        changed = await self._db.execute(
            "UPDATE keyring SET next_master_key_id = :next, rotation_started_at = :now,"
            " updated_at = :now WHERE id = :id AND master_key_id = :current"
            " AND (next_master_key_id IS NULL OR next_master_key_id = :next)",
            {"id": _ROW_ID, "current": master_key_id, "next": next_master_key_id, "now": now_us()},
        )
        return changed == 1

    async def finish_rotation(
        self, master_key_id: str, next_master_key_id: str, pepper_sealed: str, now: int
    ) -> bool:
        """The keyring goes under the next key (its pepper sealed by it), aged from `now`;
        False if it was not in the middle of that rotation."""
        changed = await self._db.execute(
            "UPDATE keyring SET master_key_id = :next, pepper_sealed = :sealed,"
            " master_key_created_at = :now, next_master_key_id = NULL,"
            " rotation_started_at = NULL, updated_at = :now"
            " WHERE id = :id AND master_key_id = :current AND next_master_key_id = :next",
            {
                "id": _ROW_ID,
                "current": master_key_id,
                "next": next_master_key_id,
                "sealed": pepper_sealed,
                "now": now,
            },
        )
        return changed == 1

    async def sealed_rows(self, spec: SealedColumns, after: str, limit: int) -> list[Row]:
        """Up to `limit` rows of `spec.table` with an id past `after`, in id order: the id, the
        context columns and the sealed ones. (Names are the code's own, never input.)"""
        columns = ", ".join(dict.fromkeys(("id", *spec.context, *spec.columns)))
        return await self._db.fetch(
            f"SELECT {columns} FROM {spec.table} WHERE id > :after ORDER BY id LIMIT :limit",
            {"after": after, "limit": limit},
        )

    async def replace_sealed(
        self, spec: SealedColumns, changes: Sequence[tuple[Row, Row]]
    ) -> list[str]:
        """Write each (row as read, its re-sealed columns) in one transaction, each only if
        its sealed columns are still as read (an instance may have changed or deleted it since);
        returns the ids that had changed and were left alone."""
        skipped: list[str] = []
        async with self._db.transaction() as tx:
            for before, after in changes:
                params: dict[str, object] = {"id": before["id"]}
                sets, checks = [], []
                for column in spec.columns:
                    params[f"new_{column}"] = after[column]
                    sets.append(f"{column} = :new_{column}")
                    if before[column] is None:
                        checks.append(f"{column} IS NULL")
                    else:
                        params[f"old_{column}"] = before[column]
                        checks.append(f"{column} = :old_{column}")
                sql = (
                    f"UPDATE {spec.table} SET {', '.join(sets)}"
                    f" WHERE id = :id AND {' AND '.join(checks)}"
                )
                if await tx.execute(sql, params) != 1:
                    skipped.append(str(before["id"]))
        return skipped
