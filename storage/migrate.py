"""Numbered schema migrations, applied in order, each once; safe to run concurrently.

Files are `migrations/NNNN_name.sql` in the SQL both backends share, with `{{serial_pk}}`
standing for an auto-incrementing primary key and `{{txid_default}}` for the writing
transaction's id (PostgreSQL; 0 on SQLite), and `{{without_rowid}}` after a table whose rows
SQLite should store in its primary key's order (PostgreSQL: nothing). A run commits as one
transaction; concurrent runs are serialized by `BEGIN IMMEDIATE` on SQLite and an advisory
lock on PostgreSQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from protocol.timefmt import now_us
from storage.database import Database, Executor

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_DIALECT_MACROS = {
    "sqlite": {
        "serial_pk": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "txid_default": "0",
        "without_rowid": "WITHOUT ROWID",
    },
    "postgresql": {
        "without_rowid": "",
        "serial_pk": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        # The writing transaction's id (xid8 fits a BIGINT): storage/webhooks/, "Order".
        "txid_default": "(pg_current_xact_id()::text::bigint)",
    },
}
_LOCK_ID = 0x6D67_7731  # arbitrary, constant: "mgw1"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self, dialect: str) -> list[str]:
        text = self.sql
        for macro, value in _DIALECT_MACROS[dialect].items():
            text = text.replace("{{" + macro + "}}", value)
        # Comments go first: they may hold semicolons. (Our SQL has no "--" inside strings.)
        lines = [ln.split("--", 1)[0] for ln in text.splitlines()]
        return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def available() -> list[Migration]:
    found = []
    for entry in resources.files("storage.migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    return sorted(found, key=lambda m: m.version)


_CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)"
)


async def _locked(db: Database, tx: Executor) -> set[int]:
    """Take the migration lock inside `tx`; returns the versions already applied."""
    if db.dialect == "postgresql":
        await tx.execute("SELECT pg_advisory_xact_lock(:id)", {"id": _LOCK_ID})
    await tx.execute(_CREATE_TABLE)
    rows = await tx.fetch("SELECT version FROM schema_migrations")
    return {int(r["version"]) for r in rows}


async def pending(db: Database) -> list[Migration]:
    async with db.transaction() as tx:
        done = await _locked(db, tx)
    return [m for m in available() if m.version not in done]


async def migrate(db: Database) -> list[Migration]:
    """Apply what is pending, all in one transaction (DDL is transactional on both backends);
    returns what this call applied (empty when up to date)."""
    applied: list[Migration] = []
    async with db.transaction() as tx:
        done = await _locked(db, tx)
        for migration in available():
            if migration.version in done:
                continue
            for statement in migration.statements(db.dialect):
                await tx.execute(statement)
            await tx.execute(
                "INSERT INTO schema_migrations (version, name, applied_at)"
                " VALUES (:version, :name, :now)",
                {"version": migration.version, "name": migration.name, "now": now_us()},
            )
            applied.append(migration)
    return applied
