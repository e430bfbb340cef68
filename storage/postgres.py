"""The production backend: PostgreSQL through asyncpg, run on Trio by trio-asyncio.

One trio-asyncio loop is opened by `open_postgres` and lives as long as the database object;
every call crosses into asyncio once, as a whole coroutine (acquire, query, release), so a
Trio cancellation cancels the asyncio task. See docs/decisions.md.

Every call is bounded by `timeout_s` (`[database] statement_timeout_s`) on the Trio side: connect,
pool acquire, each statement, COMMIT, a connection's reset. Past it the call raises
StorageUnavailable. A connection whose statement was cut short (a timeout, a cancellation) is
terminated, not handed back: its state is unknown, and behind a partition it is dead (a cancel
request or a reset would wait on the same silence). trio-asyncio waits for the asyncio task to
finish after cancelling it, so nothing on the asyncio side may wait unbounded after a cancel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
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


def _terminate(conn: Any) -> None:
    """Close a pooled connection at once (no round trip); the pool opens a new one when
    needed. One the server closed was handed back to the pool already: nothing to do."""
    try:
        conn.terminate()
    except asyncpg.InterfaceError:
        pass


def _cut_short(exc: BaseException) -> bool:
    """A block that ended this way may have left a statement running on its connection."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_cut_short(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled | StorageUnavailable)


def _rowcount(status: str) -> int:
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


class PostgresDatabase(Database):
    dialect = "postgresql"

    def __init__(self, loop: Any, pool: Any, where: str, timeout_s: float | None = None) -> None:
        self._loop = loop
        self._pool = pool
        self._where = where
        self.timeout_s = timeout_s  # every call's bound (module docstring); None: unbounded
        self._settling: set[asyncio.Task[object]] = set()  # connections cut short (_detach)

    def __repr__(self) -> str:
        return f"<PostgresDatabase {self._where} pool={self._pool.get_size()}>"

    def describe(self) -> str:
        return f"postgresql ({self._where})"

    async def _aio(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run one asyncpg coroutine on the asyncio side, bounded by `timeout_s`; cancelling
        us cancels it."""

        async def job() -> T:
            return await fn(*args)

        return await self._bounded(job)

    async def _with_conn(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        """`fn` on a pooled connection: acquire, run, release, as one bounded call."""
        pool, release_s = self._pool, self._cleanup_s()

        async def job() -> T:
            conn = await pool.acquire()
            try:
                result = await fn(conn)
            except (asyncio.CancelledError, TimeoutError):
                # Cut short: asyncpg is sending the server a cancel request. Settle the
                # connection in the background (wait for the cancel, reset; terminated past
                # `release_s`), so this call ends now and a partition's dead connection is
                # never handed out again.
                self._detach(pool.release(conn, timeout=release_s))
                raise
            except BaseException:
                await pool.release(conn, timeout=release_s)
                raise
            await pool.release(conn, timeout=release_s)
            return result

        return await self._bounded(job)

    async def _bounded(self, job: Callable[[], Awaitable[T]]) -> T:
        with _mapped_errors():
            if self.timeout_s is None:
                result: T = await self._loop.run_aio_coroutine(job())
                return result
            with trio.move_on_after(self.timeout_s):
                result = await self._loop.run_aio_coroutine(job())
                return result
        raise StorageUnavailable(f"postgresql: no answer in {self.timeout_s:g} s")

    def _detach(self, coro: Coroutine[Any, Any, object]) -> None:
        """Run `coro` on the asyncio side without waiting for it (its errors are logged)."""
        task: asyncio.Task[object] = self._loop.create_task(coro)
        self._settling.add(task)
        task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Task[object]) -> None:
        self._settling.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("postgresql: a connection cut short was dropped: %r", task.exception())

    def _cleanup_s(self) -> float:
        """The bound of a ROLLBACK, COMMIT or reset: the call timeout, at most CLEANUP_S."""
        return CLEANUP_S if self.timeout_s is None else min(CLEANUP_S, self.timeout_s)

    async def execute(self, sql: str, params: Params = _NO_PARAMS) -> int:
        text, args = _prepare(sql, params)
        status: str = await self._with_conn(lambda c: c.execute(text, *args))
        return _rowcount(status)

    async def fetch(self, sql: str, params: Params = _NO_PARAMS) -> list[Row]:
        text, args = _prepare(sql, params)
        records = await self._with_conn(lambda c: c.fetch(text, *args))
        return [dict(r) for r in records]

    async def fetch_values(self, sql: str, params: Params = _NO_PARAMS) -> list[Sequence[Any]]:
        text, args = _prepare(sql, params)
        records: list[Sequence[Any]] = await self._with_conn(lambda c: c.fetch(text, *args))
        return records  # Records are sequences already: a tuple each would cost ~0.4 µs a row

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Executor]:
        """A transaction on one connection. Its end (commit, or rollback when the block
        raises or is cancelled) and the connection's release are shielded from cancellation
        and bounded (the call timeout, at most CLEANUP_S, each): a server that stops answering
        cannot hang a stop. A block cut short (cancelled, or a statement past the timeout) ends
        at once: its connection is rolled back and released in the background once asyncpg's
        cancel request went through, or terminated (the server then rolls back) past the bound.
        A commit without an answer in time raises StorageUnavailable (its outcome is unknown);
        a rollback that fails or times out is logged and the block's own error raised; a
        connection not released in time is terminated."""
        conn = await self._aio(self._pool.acquire)
        bound = self._cleanup_s()
        try:
            tx = conn.transaction()
            await self._aio(tx.start)
            try:
                yield _ConnExecutor(self, conn)
            except BaseException as exc:
                if _cut_short(exc):
                    settle = self._settle(tx, conn, bound)
                    conn = None  # released by `settle`, in the background
                    self._detach(settle)
                else:
                    await self._rollback(tx, bound)
                raise
            else:
                with trio.CancelScope(shield=True) as scope:
                    scope.deadline = trio.current_time() + bound
                    await self._aio(tx.commit)
                if scope.cancelled_caught:
                    _terminate(conn)
                    raise StorageUnavailable(f"postgresql: no answer to COMMIT in {bound:g} s")
        finally:
            if conn is not None:
                await self._release(conn, bound)

    async def _settle(self, tx: Any, conn: Any, bound: float) -> None:
        """After a block cut short (asyncio side): ROLLBACK once asyncpg's cancel request is
        through, then release; past `bound` each, the connection is terminated."""
        try:
            await asyncio.wait_for(tx.rollback(), bound)
        except BaseException:
            _terminate(conn)
            raise
        finally:
            await self._pool.release(conn, timeout=bound)

    async def _release(self, conn: Any, bound: float) -> None:
        """asyncpg's release resets the connection and, past its timeout, terminates it (and
        raises); ours is a backstop a little later, so that its error is ours to log."""
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + bound + 1
            try:  # not self._aio: its own bound (the same as asyncpg's) would race this one
                await self._loop.run_aio_coroutine(self._pool.release(conn, timeout=bound))
            except Exception:  # the block's own outcome matters more
                log.warning("postgresql: connection reset failed; dropped", exc_info=True)
        if scope.cancelled_caught:
            log.error("postgresql: releasing a connection took over %s s", bound)

    async def _rollback(self, tx: Any, bound: float) -> None:
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + bound
            try:
                await self._aio(tx.rollback)
            except Exception:  # the block's own error matters more (often the same cause)
                log.warning("postgresql: ROLLBACK failed", exc_info=True)
        if scope.cancelled_caught:
            log.error("postgresql: no answer to ROLLBACK in %s s", bound)

    async def run_script(self, script: str) -> None:
        await self._with_conn(lambda c: c.execute(script))

    async def aclose(self) -> None:
        """Close the pool gracefully, or terminate its connections after CLOSE_S. Connections
        still settling after a call cut short (_detach) get CLEANUP_S to finish first."""
        with trio.move_on_after(CLEANUP_S):
            while self._settling:
                await self._loop.run_aio_coroutine(asyncio.wait(set(self._settling)))
        with trio.move_on_after(CLOSE_S):
            try:
                await self._aio(self._pool.close)
                return
            except StorageUnavailable:  # past the call timeout
                pass
        log.warning("postgresql: the pool did not close in %s s; terminating it", CLOSE_S)
        self._pool.terminate()


@asynccontextmanager
async def open_postgres(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    server_settings: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> AsyncIterator[PostgresDatabase]:
    """Open the asyncio bridge and a connection pool; both close when the block exits.
    `timeout_s` bounds the first connect and then every call (PostgresDatabase.timeout_s)."""
    where = _describe_url(url)
    async with trio_asyncio.open_loop() as loop:
        loop.set_exception_handler(_log_asyncio_error)
        connect = asyncpg.create_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            server_settings=server_settings,
            # the asyncio side's own bound on each new connection (the pool opens them later
            # too); ours, on the Trio side, covers the whole call
            timeout=60.0 if timeout_s is None else timeout_s,
        )
        try:
            with trio.fail_after(3600.0 if timeout_s is None else timeout_s):
                pool = await loop.run_aio_coroutine(connect)
        except trio.TooSlowError:
            raise StorageUnavailable(
                f"cannot connect to PostgreSQL at {where}: no answer in {timeout_s:g} s"
            ) from None
        except (OSError, asyncpg.PostgresError) as exc:
            raise StorageUnavailable(f"cannot connect to PostgreSQL at {where}: {exc}") from exc
        db = PostgresDatabase(loop, pool, where, timeout_s)
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
