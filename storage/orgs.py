"""Organizations and their management keys."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.credentials import NewCredential
from protocol.ids import new_id
from protocol.timefmt import now_us
from storage.database import Database, Executor, Row

PLANS = ("free", "pro")


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

    async def add_management_key(self, org_id: str, credential: NewCredential) -> str:
        async with self._db.transaction() as tx:
            return await _insert_management_key(tx, org_id, credential.hash, credential.prefix)

    async def ensure_management_key(self, org_id: str, key_hash: str, prefix: str) -> bool:
        """Accept an externally chosen key (bootstrap); idempotent. True if it was added."""
        async with self._db.transaction() as tx:
            found = await tx.fetchval(
                "SELECT id FROM management_keys WHERE key_hash = :h", {"h": key_hash}
            )
            if found is not None:
                return False
            await _insert_management_key(tx, org_id, key_hash, prefix)
            return True

    async def find_management_key(self, key_hash: str) -> ManagementKey | None:
        row = await self._db.fetchrow(
            "SELECT id, org_id, key_prefix, revoked_at FROM management_keys WHERE key_hash = :h",
            {"h": key_hash},
        )
        if row is None:
            return None
        return ManagementKey(
            id=row["id"],
            org_id=row["org_id"],
            key_prefix=row["key_prefix"],
            revoked_at=row["revoked_at"],
        )

    async def count(self) -> int:
        return int(await self._db.fetchval("SELECT count(*) FROM orgs"))


async def _insert_management_key(tx: Executor, org_id: str, key_hash: str, prefix: str) -> str:
    key_id = new_id("mk")
    await tx.execute(
        "INSERT INTO management_keys (id, org_id, key_hash, key_prefix, created_at)"
        " VALUES (:id, :org_id, :h, :prefix, :now)",
        {"id": key_id, "org_id": org_id, "h": key_hash, "prefix": prefix, "now": now_us()},
    )
    return key_id
