"""Organizations and their management keys.

A management key is revoked, never deleted (`revoked_at`); every revocation bumps the
credential cache epoch in the same transaction, so running instances drop it within their
poll (a second). `origin` says where a key came from (ORIGINS; NULL: before it was recorded).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from protocol.credentials import NewCredential
from protocol.ids import new_id
from protocol.timefmt import now_us
from storage.database import Database, Executor, Row
from storage.errors import UniqueViolation
from storage.keys import bump_credentials_epoch

PLANS = ("free", "pro")
BOOTSTRAP = "bootstrap"
ORIGINS = (BOOTSTRAP, "first_start", "create_org", "cli")


@dataclass(frozen=True, slots=True)
class Org:
    id: str
    name: str
    plan: str
    created_at: int


@dataclass(frozen=True, slots=True)
class ManagementKey:
    id: str
    org_id: str
    key_prefix: str
    revoked_at: int | None
    created_at: int = 0
    last_used_at: int | None = None
    origin: str | None = None


class Bootstrap(enum.Enum):
    """What accepting the bootstrap value did."""

    ADDED = "added"  # new: added (and the earlier bootstrap keys of the org revoked)
    PRESENT = "present"  # already an active key of the org
    REVOKED = "revoked"  # known but revoked: it stays revoked
    OTHER_ORG = "other_org"  # a key of another organization: left alone


@dataclass(frozen=True, slots=True)
class BootstrapResult:
    outcome: Bootstrap
    revoked: tuple[str, ...] = ()  # ids of earlier bootstrap keys revoked now


class Revoke(enum.Enum):
    REVOKED = "revoked"
    ALREADY = "already"
    NOT_FOUND = "not_found"
    LAST_ACTIVE = "last_active"  # refused: the org would have no working management key


_MK_COLUMNS = "id, org_id, key_prefix, revoked_at, created_at, last_used_at, origin"


def _management_key(row: Row) -> ManagementKey:
    return ManagementKey(
        id=row["id"],
        org_id=row["org_id"],
        key_prefix=row["key_prefix"],
        revoked_at=row["revoked_at"],
        created_at=int(row["created_at"]),
        last_used_at=row["last_used_at"],
        origin=row["origin"],
    )


def _org(row: Row) -> Org:
    return Org(id=row["id"], name=row["name"], plan=row["plan"], created_at=int(row["created_at"]))


class OrgRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(self, name: str, plan: str = "free") -> Org:
        """Raises UniqueViolation when the name is taken."""
        if plan not in PLANS:
            raise ValueError(f"unknown plan {plan!r}")
        org = Org(id=new_id("org"), name=name, plan=plan, created_at=now_us())
        await self._db.execute(
            "INSERT INTO orgs (id, name, plan, created_at) VALUES (:id, :name, :plan, :now)",
            {"id": org.id, "name": name, "plan": plan, "now": org.created_at},
        )
        return org

    async def get(self, org_id: str) -> Org | None:
        row = await self._db.fetchrow("SELECT * FROM orgs WHERE id = :id", {"id": org_id})
        return None if row is None else _org(row)

    async def get_by_name(self, name: str) -> Org | None:
        row = await self._db.fetchrow("SELECT * FROM orgs WHERE name = :name", {"name": name})
        return None if row is None else _org(row)

    async def get_or_create(self, name: str, plan: str = "free") -> tuple[Org, bool]:
        """The org with that name, creating it if missing; the flag says whether it was created."""
        async with self._db.transaction() as tx:
            row = await tx.fetchrow("SELECT * FROM orgs WHERE name = :name", {"name": name})
            if row is not None:
                return _org(row), False
            org = Org(id=new_id("org"), name=name, plan=plan, created_at=now_us())
            await tx.execute(
                "INSERT INTO orgs (id, name, plan, created_at) VALUES (:id, :name, :plan, :now)",
                {"id": org.id, "name": name, "plan": plan, "now": org.created_at},
            )
            return org, True

    async def add_management_key(
        self, org_id: str, credential: NewCredential, *, origin: str = "cli"
    ) -> str:
        async with self._db.transaction() as tx:
            return await _insert_management_key(
                tx, org_id, credential.hash, credential.prefix, origin
            )

    async def accept_bootstrap_key(
        self, org_id: str, key_hash: str, prefix: str
    ) -> BootstrapResult:
        """Make `org_id` accept the bootstrap value (idempotent). A value new to the database
        replaces the org's earlier bootstrap keys (they are revoked: changing the variable
        rotates the key); a known one changes nothing, a revoked one stays revoked."""
        try:
            async with self._db.transaction() as tx:
                row = await tx.fetchrow(
                    f"SELECT {_MK_COLUMNS} FROM management_keys WHERE key_hash = :h",
                    {"h": key_hash},
                )
                if row is not None:
                    return BootstrapResult(_known(_management_key(row), org_id))
                earlier = await tx.fetch(
                    "SELECT id FROM management_keys WHERE org_id = :org AND origin = :origin"
                    " AND revoked_at IS NULL ORDER BY id",
                    {"org": org_id, "origin": BOOTSTRAP},
                )
                await _insert_management_key(tx, org_id, key_hash, prefix, BOOTSTRAP)
                revoked = tuple(r["id"] for r in earlier)
                if revoked:
                    await tx.execute(
                        "UPDATE management_keys SET revoked_at = :now WHERE org_id = :org"
                        " AND origin = :origin AND revoked_at IS NULL AND key_hash <> :h",
                        {"now": now_us(), "org": org_id, "origin": BOOTSTRAP, "h": key_hash},
                    )
                    await bump_credentials_epoch(tx)
                return BootstrapResult(Bootstrap.ADDED, revoked)
        except UniqueViolation:  # another instance starting with the same value added it
            found = await self.find_management_key(key_hash)
            assert found is not None
            return BootstrapResult(_known(found, org_id))

    async def find_management_key(self, key_hash: str) -> ManagementKey | None:
        row = await self._db.fetchrow(
            f"SELECT {_MK_COLUMNS} FROM management_keys WHERE key_hash = :h", {"h": key_hash}
        )
        return None if row is None else _management_key(row)

    async def list_management_keys(self, org_id: str) -> list[ManagementKey]:
        """Every management key of the org, revoked ones included, oldest first."""
        rows = await self._db.fetch(
            f"SELECT {_MK_COLUMNS} FROM management_keys WHERE org_id = :org"
            " ORDER BY created_at, id",
            {"org": org_id},
        )
        return [_management_key(r) for r in rows]

    async def revoke_management_key(self, org_id: str, key_id: str) -> Revoke:
        """Revoke at once (running instances within a second); refused for the org's last
        active key, which would leave nothing to manage it with."""
        lock = " FOR UPDATE" if self._db.dialect == "postgresql" else ""
        async with self._db.transaction() as tx:
            # Every active key of the org, locked: two revocations at once cannot both pass
            # the last-key check. (SQLite's write transactions run one at a time.) Locked in id
            # order, the order the last-use recorder writes in, or the two can deadlock.
            active = {
                r["id"]
                for r in await tx.fetch(
                    "SELECT id FROM management_keys WHERE org_id = :org AND revoked_at IS NULL"
                    " ORDER BY id" + lock,
                    {"org": org_id},
                )
            }
            if key_id not in active:
                known = await tx.fetchval(
                    "SELECT id FROM management_keys WHERE org_id = :org AND id = :id",
                    {"org": org_id, "id": key_id},
                )
                return Revoke.NOT_FOUND if known is None else Revoke.ALREADY
            if active == {key_id}:
                return Revoke.LAST_ACTIVE
            await tx.execute(
                "UPDATE management_keys SET revoked_at = :now WHERE id = :id",
                {"now": now_us(), "id": key_id},
            )
            await bump_credentials_epoch(tx)
        return Revoke.REVOKED

    async def list_all(self, limit: int = 1000) -> list[Org]:
        """Organizations by name, at most `limit` (the operator console's selector)."""
        rows = await self._db.fetch(
            "SELECT * FROM orgs ORDER BY name, id LIMIT :limit", {"limit": limit}
        )
        return [_org(r) for r in rows]

    async def count(self) -> int:
        return int(await self._db.fetchval("SELECT count(*) FROM orgs"))


def _known(key: ManagementKey, org_id: str) -> Bootstrap:
    if key.org_id != org_id:
        return Bootstrap.OTHER_ORG
    return Bootstrap.PRESENT if key.revoked_at is None else Bootstrap.REVOKED


async def _insert_management_key(
    tx: Executor, org_id: str, key_hash: str, prefix: str, origin: str
) -> str:
    if origin not in ORIGINS:
        raise ValueError(f"unknown origin {origin!r}")
    key_id = new_id("mk")
    await tx.execute(
        "INSERT INTO management_keys (id, org_id, key_hash, key_prefix, created_at, origin)"
        " VALUES (:id, :org_id, :h, :prefix, :now, :origin)",
        {
            "id": key_id,
            "org_id": org_id,
            "h": key_hash,
            "prefix": prefix,
            "now": now_us(),
            "origin": origin,
        },
    )
    return key_id
