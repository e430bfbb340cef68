"""The production backend: PostgreSQL through asyncpg, run on Trio by trio-asyncio.

One trio-asyncio loop is opened by `open_postgres` and lives as long as the database object;
every call crosses into asyncio once, as a whole coroutine (acquire, query, release), so a
Trio cancellation cancels the asyncio task, asyncpg sends a cancel request for the running
query to the server, and the connection goes back to the pool. See docs/decisions.md.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import Any, TypeVar

import asyncpg
import trio
import trio_asyncio

from storage.database import _NO_PARAMS, Database, Executor, Params, Row, insert_sql
from storage.errors import StorageUnavailable, UniqueViolation
from storage.sql import positional_args, to_positional

T = TypeVar("T")
log = logging.getLogger(__name__)
# ROLLBACK, COMMIT and a connection's reset are one round trip each: past this the server is
# not answering, and a stopping server must not wait on it.
CLEANUP_S = 5.0
# Closing the pool waits for connections in use to come back; at shutdown they are few, and
# a server that does not answer must not hold the stop longer than this.
CLOSE_S = 10.0


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except asyncpg.UniqueViolationError as exc:
        raise UniqueViolation(str(exc.constraint_name or exc)) from None
    except _UNAVAILABLE as exc:
        raise StorageUnavailable(f"postgresql: {type(exc).__name__}") from exc
    except asyncpg.InterfaceError as exc:
        # Mostly our own misuse ("another operation is in progress"): a bug, left to
        # propagate. Only a connection closed under us, or the pool stopping, is unavailable.
        if any(m in str(exc) for m in _CLOSED_MESSAGES):
            raise StorageUnavailable(f"postgresql: {exc}") from exc
        raise


# The server cannot be reached or is refusing work for now: worth a retry (503). Other errors
# (undefined table, bad SQL, misuse of a connection) propagate as the bugs they are.
_UNAVAILABLE = (
    OSError,  # refused, reset, unreachable
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08, and the connection lost mid-query
    asyncpg.CannotConnectNowError,  # 57P03: starting up or shutting down
    asyncpg.AdminShutdownError,  # 57P01
    asyncpg.CrashShutdownError,  # 57P02
    asyncpg.TooManyConnectionsError,  # 53300
)
_CLOSED_MESSAGES = (
    "connection is closed",
    # a pooled connection the server closed is handed back to the pool at once, so the next
    # statement on it says this (we never use one after releasing it ourselves)
    "released back to the pool",
    "pool is closing",
    "pool is closed",
)


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
        """A transaction on one connection. Its end (commit, or rollback when the block
        raises or is cancelled) and the connection's release are shielded from cancellation
        and bounded by CLEANUP_S each: a server that stops answering cannot hang a stop. A
        commit without an answer in time raises StorageUnavailable (its outcome is unknown);
        a rollback that fails or times out is logged and the block's own error raised; a
        connection not released in time is terminated by the pool."""
        conn = await self._aio(self._pool.acquire)
        try:
            tx = conn.transaction()
            await self._aio(tx.start)
            try:
                yield _ConnExecutor(self, conn)
            except BaseException:
                await self._rollback(tx)
                raise
            else:
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + CLEANUP_S
                    await self._aio(tx.commit)
                if scope.cancelled_caught:
                    raise StorageUnavailable(f"postgresql: no answer to COMMIT in {CLEANUP_S} s")
        finally:
            # asyncpg's release resets the connection and, past its timeout, terminates it
            # (and raises); ours is a backstop a little later, so that its error is ours to log.
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + CLEANUP_S + 1
                try:
                    await self._aio(partial(self._pool.release, conn, timeout=CLEANUP_S))
                except Exception:  # the block's own outcome matters more
                    log.warning("postgresql: connection reset failed; dropped", exc_info=True)
            if scope.cancelled_caught:
                log.error("postgresql: releasing a connection took over %s s", CLEANUP_S)

    async def _rollback(self, tx: Any) -> None:
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + CLEANUP_S
            try:
                await self._aio(tx.rollback)
            except Exception:  # the block's own error matters more (often the same cause)
                log.warning("postgresql: ROLLBACK failed", exc_info=True)
        if scope.cancelled_caught:
            log.error("postgresql: no answer to ROLLBACK in %s s", CLEANUP_S)

    async def run_script(self, script: str) -> None:
        await self._with_conn(lambda c: c.execute(script))

    async def aclose(self) -> None:
        """Close the pool gracefully, or terminate its connections after CLOSE_S."""
        with trio.move_on_after(CLOSE_S):
            await self._aio(self._pool.close)
            return
        log.warning("postgresql: the pool did not close in %s s; terminating it", CLOSE_S)
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
        loop.set_exception_handler(_log_asyncio_error)
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
            with trio.CancelScope(shield=True):  # bounded: aclose gives up after CLOSE_S
                await db.aclose()


def _log_asyncio_error(loop: Any, context: dict[str, Any]) -> None:
    """Errors nobody awaited on the asyncio side: asyncpg leaves some when it terminates a
    connection (a cleanup that timed out). trio-asyncio's default handler re-raises them into
    the loop's nursery, which would take the database (and the process) down with them."""
    exc = context.get("exception")
    log.warning(
        "postgresql (asyncio side): %s",
        context.get("message", "unhandled error"),
        exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None,
    )


def _describe_url(url: str) -> str:
    """host:port/database, without user or password."""
    rest = url.split("://", 1)[-1]
    return rest.rsplit("@", 1)[-1].split("?", 1)[0]
