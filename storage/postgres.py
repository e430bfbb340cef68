"""The production backend: PostgreSQL through asyncpg, run on Trio by trio-asyncio.

One trio-asyncio loop is opened by `open_postgres` and lives as long as the database object;
every call crosses into asyncio once, as a whole coroutine (acquire, query, release), so a
Trio cancellation cancels the asyncio task, asyncpg sends a cancel request for the running
query to the server, and the connection goes back to the pool. See docs/decisions.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import asyncpg
import trio
import trio_asyncio

from storage.database import _NO_PARAMS, Database, Executor, Params, Row, insert_sql
from storage.errors import StorageUnavailable, UniqueViolation
from storage.sql import positional_args, to_positional

T = TypeVar("T")


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except asyncpg.UniqueViolationError as exc:
        raise UniqueViolation(str(exc.constraint_name or exc)) from None
    except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as exc:
        raise StorageUnavailable(f"postgresql: {type(exc).__name__}") from exc


def _prepare(sql: str, params: Params) -> tuple[str, list[object]]:
    text, names = to_positional(sql)
    return text, positional_args(names, params)


class _ConnExecutor(Executor):
    """Statements on one acquired connection (inside a transaction)."""

    def __init__(self, db: PostgresDatabase, conn: Any) -> None:
        self._db = db
        self._conn = conn

    async def execute(self, sql: str, params: Params = _NO_PARAMS) -> int:
        text, args = _prepare(sql, params)
        status: str = await self._db._aio(self._conn.execute, text, *args)
        return _rowcount(status)

    async def fetch(self, sql: str, params: Params = _NO_PARAMS) -> list[Row]:
        text, args = _prepare(sql, params)
        records = await self._db._aio(self._conn.fetch, text, *args)
        return [dict(r) for r in records]

    async def insert_many(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[object]]
    ) -> None:
        sql = insert_sql(table, columns, [f"${i}" for i in range(1, len(columns) + 1)])
        with _mapped_errors():
            await self._db._aio(self._conn.executemany, sql, rows)


def _rowcount(status: str) -> int:
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


class PostgresDatabase(Database):
    dialect = "postgresql"

    def __init__(self, loop: Any, pool: Any, where: str) -> None:
        self._loop = loop
        self._pool = pool
        self._where = where

    def __repr__(self) -> str:
        return f"<PostgresDatabase {self._where} pool={self._pool.get_size()}>"

    def describe(self) -> str:
        return f"postgresql ({self._where})"

    async def _aio(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run one asyncpg coroutine on the asyncio side; cancelling us cancels it."""

        async def job() -> T:
            return await fn(*args)

        with _mapped_errors():
            result: T = await self._loop.run_aio_coroutine(job())
            return result

    async def _with_conn(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        async def job() -> T:
            async with self._pool.acquire() as conn:
                return await fn(conn)

        with _mapped_errors():
            result: T = await self._loop.run_aio_coroutine(job())
            return result

    async def execute(self, sql: str, params: Params = _NO_PARAMS) -> int:
        text, args = _prepare(sql, params)
        status: str = await self._with_conn(lambda c: c.execute(text, *args))
        return _rowcount(status)

    async def fetch(self, sql: str, params: Params = _NO_PARAMS) -> list[Row]:
        text, args = _prepare(sql, params)
        records = await self._with_conn(lambda c: c.fetch(text, *args))
        return [dict(r) for r in records]

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Executor]:
        conn = await self._aio(self._pool.acquire)
        try:
            tx = conn.transaction()
            await self._aio(tx.start)
            try:
                yield _ConnExecutor(self, conn)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await self._aio(tx.rollback)
                raise
            else:
                with trio.CancelScope(shield=True):
                    await self._aio(tx.commit)
        finally:
            with trio.CancelScope(shield=True):
                await self._aio(self._pool.release, conn)

    async def run_script(self, script: str) -> None:
        await self._with_conn(lambda c: c.execute(script))

    async def aclose(self) -> None:
        with trio.move_on_after(10):
            await self._aio(self._pool.close)
            return
        self._pool.terminate()


@asynccontextmanager
async def open_postgres(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    server_settings: dict[str, str] | None = None,
) -> AsyncIterator[PostgresDatabase]:
    """Open the asyncio bridge and a connection pool; both close when the block exits."""
    where = _describe_url(url)
    async with trio_asyncio.open_loop() as loop:
        try:
            pool = await loop.run_aio_coroutine(
                asyncpg.create_pool(
                    url, min_size=min_size, max_size=max_size, server_settings=server_settings
                )
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise StorageUnavailable(f"cannot connect to PostgreSQL at {where}: {exc}") from exc
        db = PostgresDatabase(loop, pool, where)
        try:
            yield db
        finally:
            with trio.CancelScope(shield=True):
                await db.aclose()


def _describe_url(url: str) -> str:
    """host:port/database, without user or password."""
    rest = url.split("://", 1)[-1]
    return rest.rsplit("@", 1)[-1].split("?", 1)[0]
