"""Bring-your-own-key provider keys: at most one per (organization, provider).

Only the sealed value (protocol/secretbox.py) and a display hint are stored; sealing and
opening are the caller's, this module never sees a key in clear. Every change writes its
`provider_key.*` event and bumps the credential cache epoch in the same transaction, so every
instance drops what it cached (docs/decisions.md, "Provider keys"). Deleting removes the row,
ciphertext included; events keep the id, provider and hint.

A key the provider refused at use is marked invalid (`mark_invalid`: `invalid_since`, the
provider's status) with its one `provider_key.invalid` event, once however many instances
report it; storing the key again clears the mark. While marked, requests go with the gateway's
key if the org opted in (`fallback_to_gateway_key`), or are refused (services/provider_keys.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.ids import new_id
from protocol.provider_keys import refusal_reason
from protocol.timefmt import now_us
from storage import events
from storage.database import Database, Executor, Row
from storage.errors import UniqueViolation
from storage.keys import bump_credentials_epoch

_COLUMNS = (
    "id, org_id, provider, key_hint, created_at, updated_at, last_rejected_at, invalid_since,"
    " invalid_status, fallback_to_gateway_key"
)


@dataclass(frozen=True, slots=True)
class ProviderKeyRecord:
    id: str
    org_id: str
    provider: str
    key_hint: str
    created_at: int
    updated_at: int
    last_rejected_at: int | None
    invalid_since: int | None = None  # marked invalid then (µs); None while valid
    invalid_status: int | None = None  # the provider's HTTP status when it refused the key
    fallback_to_gateway_key: bool = False


@dataclass(frozen=True, slots=True)
class SealedProviderKey:
    """What a request needs to use the key: its id, the sealed value to open, and whether it
    may be used (`invalid_since` None) or what to do instead (`fallback_to_gateway_key`)."""

    id: str
    provider: str
    sealed_key: str
    invalid_since: int | None = None
    invalid_status: int | None = None
    fallback_to_gateway_key: bool = False


def _record(row: Row) -> ProviderKeyRecord:
    return ProviderKeyRecord(
        id=row["id"],
        org_id=row["org_id"],
        provider=row["provider"],
        key_hint=row["key_hint"],
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
        last_rejected_at=row["last_rejected_at"],
        invalid_since=row["invalid_since"],
        invalid_status=row["invalid_status"],
        fallback_to_gateway_key=bool(row["fallback_to_gateway_key"]),
    )


def event_data(record: ProviderKeyRecord) -> dict[str, Any]:
    """What `provider_key.created/updated/deleted` carry: never the key or its ciphertext."""
    return {"provider_key_id": record.id, "provider": record.provider, "key_hint": record.key_hint}


def invalid_event_data(record: ProviderKeyRecord) -> dict[str, Any]:
    """What `provider_key.invalid` carries (fields fixed by the webhook contract)."""
    return {
        "provider_key_id": record.id,
        "provider": record.provider,
        "status": record.invalid_status,
        "reason": refusal_reason(record.invalid_status),
    }


class ProviderKeyRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def put(
        self,
        org_id: str,
        provider: str,
        sealed_key: str,
        key_hint: str,
        *,
        fallback_to_gateway_key: bool = False,
    ) -> tuple[ProviderKeyRecord, bool]:
        """Store the org's key for `provider`, replacing the one it had (same id; valid again:
        `invalid_since` and `last_rejected_at` cleared); True when it is new. Writes
        `provider_key.created` or `.updated`."""
        try:
            return await self._put(org_id, provider, sealed_key, key_hint, fallback_to_gateway_key)
        except UniqueViolation:
            # Another request inserted the first key for this provider meanwhile: replace it.
            return await self._put(org_id, provider, sealed_key, key_hint, fallback_to_gateway_key)

    async def _put(
        self, org_id: str, provider: str, sealed_key: str, key_hint: str, fallback: bool
    ) -> tuple[ProviderKeyRecord, bool]:
        now = now_us()
        params = {
            "org_id": org_id,
            "provider": provider,
            "sealed": sealed_key,
            "hint": key_hint,
            "fallback": fallback,
        }
        async with self._db.transaction() as tx:
            row = await tx.fetchrow(
                f"SELECT {_COLUMNS} FROM provider_keys"
                " WHERE org_id = :org_id AND provider = :provider",
                {"org_id": org_id, "provider": provider},
            )
            if row is None:
                record = ProviderKeyRecord(
                    new_id("pk"),
                    org_id,
                    provider,
                    key_hint,
                    now,
                    now,
                    None,
                    fallback_to_gateway_key=fallback,
                )
                await tx.execute(
                    "INSERT INTO provider_keys (id, org_id, provider, sealed_key, key_hint,"
                    " created_at, updated_at, fallback_to_gateway_key) VALUES (:id, :org_id,"
                    " :provider, :sealed, :hint, :now, :now, :fallback)",
                    {**params, "id": record.id, "now": now},
                )
            else:
                record = ProviderKeyRecord(
                    row["id"],
                    org_id,
                    provider,
                    key_hint,
                    int(row["created_at"]),
                    now,
                    None,
                    fallback_to_gateway_key=fallback,
                )
                await tx.execute(
                    "UPDATE provider_keys SET sealed_key = :sealed, key_hint = :hint,"
                    " updated_at = :now, last_rejected_at = NULL, invalid_since = NULL,"
                    " invalid_status = NULL, fallback_to_gateway_key = :fallback WHERE id = :id",
                    {**params, "now": now, "id": record.id},
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
            "SELECT id, provider, sealed_key, invalid_since, invalid_status,"
            " fallback_to_gateway_key FROM provider_keys"
            " WHERE org_id = :org_id AND provider = :provider",
            {"org_id": org_id, "provider": provider},
        )
        if row is None:
            return None
        return SealedProviderKey(
            row["id"],
            row["provider"],
            row["sealed_key"],
            invalid_since=row["invalid_since"],
            invalid_status=row["invalid_status"],
            fallback_to_gateway_key=bool(row["fallback_to_gateway_key"]),
        )

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

    async def mark_invalid(
        self, org_id: str, key: SealedProviderKey, *, status: int | None
    ) -> ProviderKeyRecord | None:
        """Mark this exact key (the sealed value still stored) invalid: the provider answered
        `status` (401/403) to a request sent with it. In one transaction: the mark, the
        credential epoch (every instance drops its cached copy) and one `provider_key.invalid`
        event. Only the first mark of a key counts: an already invalid key, a replaced or a
        deleted one changes nothing, so instances reporting at once write one event between
        them (the conditional update is the arbiter: PostgreSQL re-checks `invalid_since` once
        the first writer commits, SQLite has one writer at a time). The marked record, or None.
        """
        now = now_us()
        async with self._db.transaction() as tx:
            changed = await tx.execute(
                "UPDATE provider_keys SET invalid_since = :now, invalid_status = :status,"
                " last_rejected_at = :now"
                " WHERE id = :id AND org_id = :org_id AND sealed_key = :sealed"
                " AND invalid_since IS NULL",
                {
                    "now": now,
                    "status": status,
                    "id": key.id,
                    "org_id": org_id,
                    "sealed": key.sealed_key,
                },
            )
            if not changed:
                return None
            record = await _get(tx, org_id, key.id)
            assert record is not None  # updated just now, in this transaction
            await bump_credentials_epoch(tx)
            await events.append(tx, org_id, "provider_key.invalid", invalid_event_data(record))
        return record


async def _get(executor: Executor, org_id: str, key_id: str) -> ProviderKeyRecord | None:
    row = await executor.fetchrow(
        f"SELECT {_COLUMNS} FROM provider_keys WHERE id = :id AND org_id = :org_id",
        {"id": key_id, "org_id": org_id},
    )
    return None if row is None else _record(row)
