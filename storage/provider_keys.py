"""Bring-your-own-key provider keys: at most one per (organization, provider).

Only the sealed value (protocol/secretbox.py) and a display hint are stored; sealing and
opening are the caller's, this module never sees a key in clear. Every change writes its
`provider_key.*` event and bumps the credential cache epoch in the same transaction, so every
instance drops what it cached (docs/decisions.md, "Provider keys"). Deleting removes the row,
ciphertext included; events keep the id, provider and hint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.ids import new_id
from protocol.timefmt import now_us
from storage import events
from storage.database import Database, Executor, Row
from storage.errors import UniqueViolation
from storage.keys import bump_credentials_epoch

_COLUMNS = "id, org_id, provider, key_hint, created_at, updated_at, last_rejected_at"


@dataclass(frozen=True, slots=True)
class ProviderKeyRecord:
    id: str
    org_id: str
    provider: str
    key_hint: str
    created_at: int
    updated_at: int
    last_rejected_at: int | None


@dataclass(frozen=True, slots=True)
class SealedProviderKey:
    """What a request needs to use the key: its id and the sealed value to open."""

    id: str
    provider: str
    sealed_key: str


def _record(row: Row) -> ProviderKeyRecord:
    return ProviderKeyRecord(
        id=row["id"],
        org_id=row["org_id"],
        provider=row["provider"],
        key_hint=row["key_hint"],
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
        last_rejected_at=row["last_rejected_at"],
    )


def event_data(record: ProviderKeyRecord) -> dict[str, Any]:
    """What `provider_key.*` events carry: never the key or its ciphertext."""
    return {"provider_key_id": record.id, "provider": record.provider, "key_hint": record.key_hint}


class ProviderKeyRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def put(
        self, org_id: str, provider: str, sealed_key: str, key_hint: str
    ) -> tuple[ProviderKeyRecord, bool]:
        """Store the org's key for `provider`, replacing the one it had (same id, cleared
        `last_rejected_at`); True when it is new. Writes `provider_key.created` or `.updated`."""
        try:
            return await self._put(org_id, provider, sealed_key, key_hint)
        except UniqueViolation:
            # Another request inserted the first key for this provider meanwhile: replace it.
            return await self._put(org_id, provider, sealed_key, key_hint)

    async def _put(
        self, org_id: str, provider: str, sealed_key: str, key_hint: str
    ) -> tuple[ProviderKeyRecord, bool]:
        now = now_us()
        params = {"org_id": org_id, "provider": provider, "sealed": sealed_key, "hint": key_hint}
        async with self._db.transaction() as tx:
            row = await tx.fetchrow(
                f"SELECT {_COLUMNS} FROM provider_keys"
                " WHERE org_id = :org_id AND provider = :provider",
                {"org_id": org_id, "provider": provider},
            )
            if row is None:
                record = ProviderKeyRecord(new_id("pk"), org_id, provider, key_hint, now, now, None)
                await tx.execute(
                    "INSERT INTO provider_keys (id, org_id, provider, sealed_key, key_hint,"
                    " created_at, updated_at) VALUES (:id, :org_id, :provider, :sealed, :hint,"
                    " :now, :now)",
                    {**params, "id": record.id, "now": now},
                )
            else:
                record = ProviderKeyRecord(
                    row["id"], org_id, provider, key_hint, int(row["created_at"]), now, None
                )
                await tx.execute(
                    "UPDATE provider_keys SET sealed_key = :sealed, key_hint = :hint,"
                    " updated_at = :now, last_rejected_at = NULL WHERE id = :id",
                    {"sealed": sealed_key, "hint": key_hint, "now": now, "id": record.id},
                )
            created = row is None
            await bump_credentials_epoch(tx)
            kind = "provider_key.created" if created else "provider_key.updated"
            await events.append(tx, org_id, kind, event_data(record))
        return record, created

    async def list(self, org_id: str) -> list[ProviderKeyRecord]:
        """The org's keys, by provider name (there is at most one per provider)."""
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM provider_keys WHERE org_id = :org_id ORDER BY provider",
            {"org_id": org_id},
        )
        return [_record(r) for r in rows]

    async def get(self, org_id: str, key_id: str) -> ProviderKeyRecord | None:
        return await _get(self._db, org_id, key_id)

    async def for_use(self, org_id: str, provider: str) -> SealedProviderKey | None:
        """The sealed key requests of this org to `provider` are sent with, if any."""
        row = await self._db.fetchrow(
            "SELECT id, provider, sealed_key FROM provider_keys"
            " WHERE org_id = :org_id AND provider = :provider",
            {"org_id": org_id, "provider": provider},
        )
        if row is None:
            return None
        return SealedProviderKey(row["id"], row["provider"], row["sealed_key"])

    async def delete(self, org_id: str, key_id: str) -> ProviderKeyRecord | None:
        """Remove the key (ciphertext included); the removed record, or None if there was none.
        Writes `provider_key.deleted`."""
        async with self._db.transaction() as tx:
            record = await _get(tx, org_id, key_id)
            if record is None:
                return None
            await tx.execute("DELETE FROM provider_keys WHERE id = :id", {"id": key_id})
            await bump_credentials_epoch(tx)
            await events.append(tx, org_id, "provider_key.deleted", event_data(record))
        return record

    async def mark_rejected(
        self, org_id: str, key: SealedProviderKey, *, status: int | None, interval_us: int
    ) -> bool:
        """Record that the provider refused this exact key (the sealed value still stored) and
        write `provider_key.invalid`, unless that was recorded less than `interval_us` ago — so
        all instances together write at most one event per key per interval. True if written.
        """
        now = now_us()
        async with self._db.transaction() as tx:
            changed = await tx.execute(
                "UPDATE provider_keys SET last_rejected_at = :now"
                " WHERE id = :id AND org_id = :org_id AND sealed_key = :sealed"
                " AND (last_rejected_at IS NULL OR last_rejected_at <= :since)",
                {
                    "now": now,
                    "id": key.id,
                    "org_id": org_id,
                    "sealed": key.sealed_key,
                    "since": now - interval_us,
                },
            )
            if not changed:
                return False
            record = await _get(tx, org_id, key.id)
            assert record is not None  # updated just now, in this transaction
            data = {**event_data(record), "upstream_status": status}
            await events.append(tx, org_id, "provider_key.invalid", data)
        return True


async def _get(executor: Executor, org_id: str, key_id: str) -> ProviderKeyRecord | None:
    row = await executor.fetchrow(
        f"SELECT {_COLUMNS} FROM provider_keys WHERE id = :id AND org_id = :org_id",
        {"id": key_id, "org_id": org_id},
    )
    return None if row is None else _record(row)
