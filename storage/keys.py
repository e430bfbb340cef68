"""Secret API keys of an organization: the Keys API's storage.

Every change writes its `key.*` event to the outbox and bumps the credential cache epoch in the
same transaction. Deleting is permanent but keeps the row (with `deleted_at`) so that usage and
events that name the key stay meaningful; a deleted key's name may be reused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from protocol.credentials import NewCredential
from protocol.ids import new_id
from protocol.timefmt import now_us
from storage import events
from storage.database import Database, Executor, Row

_COLUMNS = (
    "id, org_id, name, key_prefix, scopes, rate_limit_rpm, daily_budget_micros,"
    " monthly_budget_micros, allowed_models, expires_at, is_active, created_at, updated_at,"
    " last_used_at, deleted_at, cache"
)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    org_id: str
    name: str
    key_prefix: str
    scopes: tuple[str, ...] | None  # None: every scope
    rate_limit_rpm: int | None
    daily_budget_micros: int | None
    monthly_budget_micros: int | None
    allowed_models: tuple[str, ...] | None  # None: every model
    expires_at: int | None
    is_active: bool
    created_at: int
    updated_at: int
    last_used_at: int | None
    deleted_at: int | None
    cache: bool = True  # False: the key opted out of the response cache


# Fields a PATCH may change, in storage terms.
UPDATABLE = frozenset(
    {
        "name",
        "scopes",
        "rate_limit_rpm",
        "daily_budget_micros",
        "monthly_budget_micros",
        "allowed_models",
        "expires_at",
        "is_active",
        "cache",
    }
)
_JSON_COLUMNS = frozenset({"scopes", "allowed_models"})


def _dump_list(value: tuple[str, ...] | list[str] | None) -> str | None:
    return None if value is None else json.dumps(list(value))


def _load_list(value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(json.loads(value))


def _record(row: Row) -> KeyRecord:
    return KeyRecord(
        id=row["id"],
        org_id=row["org_id"],
        name=row["name"],
        key_prefix=row["key_prefix"],
        scopes=_load_list(row["scopes"]),
        rate_limit_rpm=row["rate_limit_rpm"],
        daily_budget_micros=row["daily_budget_micros"],
        monthly_budget_micros=row["monthly_budget_micros"],
        allowed_models=_load_list(row["allowed_models"]),
        expires_at=row["expires_at"],
        is_active=bool(row["is_active"]),
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
        last_used_at=row["last_used_at"],
        deleted_at=row["deleted_at"],
        cache=bool(row["cache"]),
    )


def _params(record: KeyRecord) -> dict[str, object]:
    values: dict[str, object] = {f.name: getattr(record, f.name) for f in fields(record)}
    values["scopes"] = _dump_list(record.scopes)
    values["allowed_models"] = _dump_list(record.allowed_models)
    return values


def event_data(record: KeyRecord) -> dict[str, Any]:
    """What `key.*` events carry: identity and limits, never the secret or its hash."""
    return {
        "key_id": record.id,
        "key_name": record.name,
        "key_prefix": record.key_prefix,
        "is_active": record.is_active,
    }


async def bump_credentials_epoch(tx: Executor) -> None:
    await tx.execute("UPDATE cache_epochs SET epoch = epoch + 1 WHERE name = 'credentials'")


class KeyRepository:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._locks = db.dialect == "postgresql"  # see `_live`

    async def create(
        self, org_id: str, credential: NewCredential, settings: Mapping[str, Any]
    ) -> KeyRecord:
        """Insert a key with `settings` (the UPDATABLE fields). UniqueViolation: name taken."""
        now = now_us()
        record = KeyRecord(
            id=new_id("key"),
            org_id=org_id,
            name=settings["name"],
            key_prefix=credential.prefix,
            scopes=_tuple(settings.get("scopes")),
            rate_limit_rpm=settings.get("rate_limit_rpm"),
            daily_budget_micros=settings.get("daily_budget_micros"),
            monthly_budget_micros=settings.get("monthly_budget_micros"),
            allowed_models=_tuple(settings.get("allowed_models")),
            expires_at=settings.get("expires_at"),
            is_active=True,
            created_at=now,
            updated_at=now,
            last_used_at=None,
            deleted_at=None,
            cache=settings.get("cache", True),
        )
        async with self._db.transaction() as tx:
            await tx.execute(
                f"INSERT INTO api_keys ({_COLUMNS}, key_hash) VALUES (:id, :org_id, :name,"
                " :key_prefix, :scopes, :rate_limit_rpm, :daily_budget_micros,"
                " :monthly_budget_micros, :allowed_models, :expires_at, :is_active, :created_at,"
                " :updated_at, :last_used_at, :deleted_at, :cache, :key_hash)",
                {**_params(record), "key_hash": credential.hash},
            )
            await events.append(tx, org_id, "key.created", event_data(record))
        return record

    async def get(self, org_id: str, key_id: str) -> KeyRecord | None:
        """A live (not deleted) key of this org."""
        return await _live(self._db, org_id, key_id)

    async def find_by_hash(self, key_hash: str) -> KeyRecord | None:
        """Any key with that hash, deleted ones included (so auth can say why it fails)."""
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM api_keys WHERE key_hash = :h", {"h": key_hash}
        )
        return None if row is None else _record(row)

    async def list(
        self, org_id: str, *, active: bool | None, limit: int, offset: int
    ) -> tuple[list[KeyRecord], int]:
        """A page of live keys, oldest first, and the total matching the filter."""
        where = "org_id = :org_id AND deleted_at IS NULL"
        params: dict[str, object] = {"org_id": org_id, "limit": limit, "offset": offset}
        if active is not None:
            where += " AND is_active = :active"
            params["active"] = active
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM api_keys WHERE {where}"
            " ORDER BY created_at, id LIMIT :limit OFFSET :offset",
            params,
        )
        total = await self._db.fetchval(f"SELECT count(*) FROM api_keys WHERE {where}", params)
        return [_record(r) for r in rows], int(total)

    async def update(
        self,
        org_id: str,
        key_id: str,
        changes: Mapping[str, Any],
        *,
        check: Callable[[KeyRecord, KeyRecord], None] | None = None,
    ) -> KeyRecord | None:
        """Apply `changes` (a subset of UPDATABLE); None if no such live key.

        `check(current, updated)` runs inside the transaction, on the row as it is then; an
        exception from it changes nothing and propagates.
        UniqueViolation: the new name is taken.
        """
        unknown = set(changes) - UPDATABLE
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        async with self._db.transaction() as tx:
            current = await _live(tx, org_id, key_id, for_update=self._locks)
            if current is None:
                return None
            normalized: dict[str, Any] = {
                k: (_tuple(v) if k in _JSON_COLUMNS else v) for k, v in changes.items()
            }
            updated = replace(current, **normalized, updated_at=now_us())
            if check is not None:
                check(current, updated)
            params = _params(updated)
            assignments = ", ".join(f"{c} = :{c}" for c in [*sorted(changes), "updated_at"])
            await tx.execute(
                f"UPDATE api_keys SET {assignments} WHERE id = :id",
                {c: params[c] for c in [*changes, "updated_at", "id"]},
            )
            await bump_credentials_epoch(tx)
            changed = sorted(k for k in changes if getattr(current, k) != getattr(updated, k))
            await events.append(
                tx, org_id, "key.updated", {**event_data(updated), "changed": changed}
            )
        return updated

    async def delete(
        self, org_id: str, key_id: str, *, check: Callable[[KeyRecord], None] | None = None
    ) -> bool:
        """Revoke permanently; False if no such live key. `check(current)` as for `update`."""
        async with self._db.transaction() as tx:
            current = await _live(tx, org_id, key_id, for_update=self._locks)
            if current is None:
                return False
            if check is not None:
                check(current)
            now = now_us()
            await tx.execute(
                "UPDATE api_keys SET deleted_at = :now, is_active = :inactive, updated_at = :now"
                " WHERE id = :id",
                {"now": now, "inactive": False, "id": key_id},
            )
            await bump_credentials_epoch(tx)
            record = replace(current, is_active=False, deleted_at=now)
            await events.append(tx, org_id, "key.deleted", event_data(record))
        return True

    async def record_last_used(self, last_used: Mapping[str, int]) -> None:
        """Write a batch of `key id -> last use` in one transaction; never moves a time back.
        Management keys' ids (`mk_...`) are written to their own table."""
        if not last_used:
            return
        async with self._db.transaction() as tx:
            for key_id, when in sorted(last_used.items()):
                table = "management_keys" if key_id.startswith("mk_") else "api_keys"
                await tx.execute(
                    f"UPDATE {table} SET last_used_at = :when WHERE id = :id"
                    " AND (last_used_at IS NULL OR last_used_at < :when)",
                    {"id": key_id, "when": when},
                )

    async def credentials_epoch(self) -> int:
        return int(
            await self._db.fetchval("SELECT epoch FROM cache_epochs WHERE name = 'credentials'")
        )


async def _live(
    executor: Executor, org_id: str, key_id: str, *, for_update: bool = False
) -> KeyRecord | None:
    """`for_update` (PostgreSQL, in a transaction): the row stays locked until it ends, so a
    change checked against it (`update`, `delete`) is checked against what it overwrites.
    SQLite needs no lock: its write transactions run one at a time (BEGIN IMMEDIATE)."""
    row = await executor.fetchrow(
        f"SELECT {_COLUMNS} FROM api_keys"
        " WHERE id = :id AND org_id = :org_id AND deleted_at IS NULL"
        + (" FOR UPDATE" if for_update else ""),
        {"id": key_id, "org_id": org_id},
    )
    return None if row is None else _record(row)


def _tuple(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)
