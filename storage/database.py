"""The one interface both backends implement.

SQL is written once, with named parameters (`:name`), in the subset SQLite and PostgreSQL share.
Semantics every backend keeps:

- `fetch`/`fetchrow`/`fetchval` on the Database are reads; they may run on a read pool.
- `execute` on the Database is a single autocommitted write.
- `transaction()` yields an Executor whose statements (reads and writes, `RETURNING` included)
  run in one transaction, committed when the block exits normally and rolled back otherwise.
  Rows are plain dicts.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

Row = dict[str, Any]
Params = Mapping[str, object]
_NO_PARAMS: Params = {}


class Executor(abc.ABC):
    @abc.abstractmethod
    async def execute(self, sql: str, params: Params = _NO_PARAMS) -> int:
        """Run a statement; returns the number of rows it changed."""

    @abc.abstractmethod
    async def fetch(self, sql: str, params: Params = _NO_PARAMS) -> list[Row]: ...

    async def insert_many(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[object]]
    ) -> None:
        """Insert `rows` (values in the order of `columns`) into `table`, in bulk. `table` and
        `columns` are the code's own names, never input. Backends override this with their
        driver's fastest way (sqlite.py, postgres.py); this fallback is one statement a row."""
        sql = insert_sql(table, columns, [f":p{i}" for i in range(len(columns))])
        for row in rows:
            await self.execute(sql, {f"p{i}": value for i, value in enumerate(row)})

    async def fetch_values(self, sql: str, params: Params = _NO_PARAMS) -> list[Sequence[Any]]:
        """The rows as sequences of the selected columns' values, in order (tuples; asyncpg's
        records, which compare equal to tuples): for reads of thousands of rows, where a dict
        per row costs more than the query. Backends override this fallback."""
        return [tuple(row.values()) for row in await self.fetch(sql, params)]

    async def fetchrow(self, sql: str, params: Params = _NO_PARAMS) -> Row | None:
        rows = await self.fetch(sql, params)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, params: Params = _NO_PARAMS) -> Any:
        row = await self.fetchrow(sql, params)
        return None if row is None else next(iter(row.values()))


def insert_sql(
    table: str, columns: Sequence[str], placeholders: Sequence[str], rows: int = 1
) -> str:
    """`INSERT INTO table (columns) VALUES (placeholders)`, the values `rows` times."""
    one = f"({', '.join(placeholders)})"
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([one] * rows)}"


class Database(Executor):
    dialect: str  # "sqlite" or "postgresql"
    # Every call's bound in seconds (`[database] statement_timeout_s`): past it the call raises
    # StorageUnavailable. None: unbounded (migrations, which may run long).
    timeout_s: float | None = None

    @abc.abstractmethod
    def transaction(self) -> AbstractAsyncContextManager[Executor]: ...

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    def describe(self) -> str:
        """What to print at start: the backend and where (no credentials)."""
        return self.dialect
