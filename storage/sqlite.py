"""The embedded backend: SQLite in WAL mode.

All writes go through one dedicated writer thread (one connection); a process-wide lock
serializes transactions on it, and `BEGIN IMMEDIATE` plus `busy_timeout` serializes writers
across processes (`gateway serve --workers N`). Reads use a small pool of reader connections
on Trio's worker threads, so they never queue behind a write.

`timeout_s` (`[database] statement_timeout_s`) bounds the waits: SQLite's busy timeout (another
process holding the write lock), the wait for this process's transaction lock and for a
reader; past it a call raises StorageUnavailable. A statement already running on a thread is
not abandoned (sqlite_thread.py): it is local work, not a wait on a peer that may never answer.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import trio

from storage.database import _NO_PARAMS, Database, Executor, Params, Row, insert_sql
from storage.errors import StorageUnavailable, UniqueViolation
from storage.private_paths import private_dir, private_file
from storage.sqlite_thread import ConnectionThread

T = TypeVar("T")
_BUSY_TIMEOUT_MS = 10_000
_READERS = 4
_MAX_PARAMS = 30_000  # per statement (SQLite's limit is 32,766 since 3.32)
_CHUNK_ROWS = (256, 64, 16, 4, 1)  # rows per insert statement, largest first


def _connect(path: str, busy_timeout_ms: int = _BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path,
        check_same_thread=False,  # created here, used on the owning thread
        isolation_level=None,  # we issue BEGIN/COMMIT ourselves
        timeout=busy_timeout_ms / 1000,
    )
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
    return conn


def _rows(cursor: sqlite3.Cursor) -> list[Row]:
    # SQLite has no boolean type: repositories read boolean columns through bool().
    return [dict(r) for r in cursor.fetchall()]


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except sqlite3.IntegrityError as exc:
        if "UNIQUE" in str(exc):
            raise UniqueViolation(str(exc)) from None
        raise
    except sqlite3.OperationalError as exc:
        if _primary_code(exc) in _UNAVAILABLE:
            raise StorageUnavailable(f"sqlite: {exc}") from exc
        raise  # a bug (no such table, bad SQL): a 500 with its traceback, not "retry shortly"


# The database cannot be used right now, for reasons outside the statement: worth a retry
# (503). Everything else, OperationalError included ("no such table", a syntax error),
# propagates as the bug it is.
_UNAVAILABLE = frozenset(
    {
        sqlite3.SQLITE_BUSY,  # another process held the lock past busy_timeout
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_IOERR,  # disk I/O error
        sqlite3.SQLITE_FULL,  # database or disk is full
        sqlite3.SQLITE_CANTOPEN,  # unable to open the database file
        sqlite3.SQLITE_READONLY,  # read-only file system or file
        sqlite3.SQLITE_PROTOCOL,  # WAL lock protocol error (a race with another process)
    }
)


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF  # extended codes keep the primary in the low byte


class _WriterExecutor(Executor):
    """Statements inside one transaction, all on the writer thread."""

    def __init__(self, writer: ConnectionThread) -> None:
        self._writer = writer

    async def execute(self, sql: str, params: Params = _NO_PARAMS) -> int:
        return await self._writer.call(lambda c: _run(c, sql, params).rowcount)

    async def fetch(self, sql: str, params: Params = _NO_PARAMS) -> list[Row]:
        return await self._writer.call(lambda c: _rows(_run(c, sql, params)))

    async def insert_many(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[object]]
    ) -> None:
        # Many rows per statement (`VALUES (?, …), (?, …), …`), not executemany: sqlite3 lets
        # go of the GIL around every step, so a row per step made the writer thread and the
        # event loop trade the GIL once a row (measured: ~5 against ~8 µs a row). Statements
        # of a few fixed sizes only (256, 64, 16, 4, 1 rows), so that sqlite3's statement
        # cache keeps them compiled: a size per batch compiled one big statement per flush
        # and held ~100 KB for each size seen. Positional parameters: named ones bind in
        # quadratic time.
        sizes = [n for n in _CHUNK_ROWS if n * len(columns) <= _MAX_PARAMS] or [1]
        marks = ["?"] * len(columns)

        def run(conn: sqlite3.Connection) -> None:
            with _mapped_errors():
                start = 0
                for size in sizes:
                    sql = insert_sql(table, columns, marks, size)
                    while len(rows) - start >= size:
                        chunk = rows[start : start + size]
                        conn.execute(sql, [value for row in chunk for value in row])
                        start += size

        await self._writer.call(run)


def _run(conn: sqlite3.Connection, sql: str, params: Params) -> sqlite3.Cursor:
    with _mapped_errors():
        return conn.execute(sql, dict(params))


def _values(conn: sqlite3.Connection, sql: str, params: Params) -> list[Sequence[Any]]:
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples, not sqlite3.Row then a dict
    with _mapped_errors():
        rows: list[Sequence[Any]] = cursor.execute(sql, dict(params)).fetchall()
        return rows


class SQLiteDatabase(Database):
    dialect = "sqlite"

    def __init__(self, path: str, timeout_s: float | None = None) -> None:
        self.path = path
        self.timeout_s = timeout_s
        busy_ms = _BUSY_TIMEOUT_MS if timeout_s is None else max(1, round(timeout_s * 1000))
        self._writer = ConnectionThread(
            _connect(path, busy_ms), name=f"sqlite-writer:{Path(path).name}"
        )
        self._tx_lock = trio.Lock()
        self._readers = [_connect(path, busy_ms) for _ in range(_READERS)]
        self._reader_limit = trio.CapacityLimiter(_READERS)

    def __repr__(self) -> str:
        return f"<SQLiteDatabase {self.path!r} writer={self._writer!r}>"

    def describe(self) -> str:
        return f"sqlite ({self.path})"

    @asynccontextmanager
    async def _waiting_for(self, lock: trio.Lock | trio.CapacityLimiter) -> AsyncIterator[None]:
        """Hold `lock`, waiting for it at most `timeout_s`."""
        acquired = False
        with trio.move_on_after(math.inf if self.timeout_s is None else self.timeout_s):
            await lock.acquire()
            acquired = True
        if not acquired:
            raise StorageUnavailable(f"sqlite: busy for over {self.timeout_s:g} s")
        try:
            yield
        finally:
            lock.release()

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self._waiting_for(self._reader_limit):
            conn = self._readers.pop()
            try:
                return await trio.to_thread.run_sync(fn, conn)
            finally:
                self._readers.append(conn)

    async def fetch(self, sql: str, params: Params = _NO_PARAMS) -> list[Row]:
        return await self._read(lambda c: _rows(_run(c, sql, params)))

    async def fetch_values(self, sql: str, params: Params = _NO_PARAMS) -> list[Sequence[Any]]:
        return await self._read(lambda c: _values(c, sql, params))

    async def execute(self, sql: str, params: Params = _NO_PARAMS) -> int:
        async with self.transaction() as tx:
            return await tx.execute(sql, params)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Executor]:
        """One write transaction. Its COMMIT or ROLLBACK is shielded without a deadline: a
        writer-thread call cannot be abandoned (module docstring of sqlite_thread), so a
        deadline could not shorten it; both are local and bounded by busy_timeout (10 s)."""
        async with self._waiting_for(self._tx_lock):
            await self._writer.call(lambda c: _run(c, "BEGIN IMMEDIATE", {}))
            try:
                yield _WriterExecutor(self._writer)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await self._writer.call(lambda c: c.execute("ROLLBACK"))
                raise
            else:
                with trio.CancelScope(shield=True):
                    await self._writer.call(lambda c: _run(c, "COMMIT", {}))

    async def run_script(self, script: str) -> None:
        """Run several statements at once (migrations); not in a transaction of ours."""
        await self._writer.call(lambda c: c.executescript(script))

    async def aclose(self) -> None:
        await self._writer.aclose()
        for conn in self._readers:
            conn.close()


def open_sqlite(path: str, *, timeout_s: float | None = None) -> SQLiteDatabase:
    """The database at `path`; a new one is created readable by this user only (its directory
    too, and so its -wal and -shm files: storage/private_paths.py)."""
    if path != ":memory:":
        private_dir(Path(path).parent)
        private_file(Path(path))
    return SQLiteDatabase(path, timeout_s)
