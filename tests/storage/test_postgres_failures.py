"""PostgreSQL when the server stops answering or the connection dies: transaction cleanup ends
in bounded time, and only connection-level failures become StorageUnavailable. The server is
reached through a loopback forwarder that can be frozen (bytes held, nothing closed)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import trio

from storage import postgres
from storage.errors import StorageUnavailable
from storage.postgres import PostgresDatabase, open_postgres
from tests.backends import POSTGRES_URL

pytestmark = pytest.mark.skipif(POSTGRES_URL is None, reason="needs GATEWAY_TEST_DATABASE_URL")
CLEANUP_S = 0.5


class Forwarder:
    """127.0.0.1:port → the PostgreSQL server; `freeze()` stops passing bytes both ways."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.thawed = trio.Event()
        self.thawed.set()

    def freeze(self) -> None:
        self.thawed = trio.Event()

    def thaw(self) -> None:
        self.thawed.set()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._client, listeners)

    async def _client(self, client: trio.SocketStream) -> None:
        async with client, await trio.open_tcp_stream(*self.target) as server:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, client, server, nursery.cancel_scope)
                nursery.start_soon(self._pump, server, client, nursery.cancel_scope)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope
    ) -> None:
        try:
            async for data in source:
                await self.thawed.wait()
                await sink.send_all(data)
        except trio.BrokenResourceError:
            pass
        scope.cancel()


@asynccontextmanager
async def through_forwarder() -> AsyncIterator[tuple[PostgresDatabase, Forwarder]]:
    assert POSTGRES_URL is not None
    parts = urlsplit(POSTGRES_URL)
    forwarder = Forwarder((parts.hostname or "127.0.0.1", parts.port or 5432))
    async with trio.open_nursery() as nursery:
        await nursery.start(forwarder.serve)
        user = f"{parts.username}@" if parts.username else ""
        url = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{forwarder.port}"))
        async with open_postgres(url, min_size=1, max_size=2) as db:
            try:
                yield db, forwarder
            finally:
                forwarder.thaw()
        nursery.cancel_scope.cancel()


@pytest.fixture(autouse=True)
def short_cleanup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "CLEANUP_S", CLEANUP_S)


async def test_a_cancelled_transaction_does_not_hang_when_the_server_stops_answering() -> None:
    async with through_forwarder() as (db, forwarder):
        started = time.monotonic()
        with trio.move_on_after(0.3) as block:
            async with db.transaction() as tx:
                assert await tx.fetchval("SELECT 1") == 1
                forwarder.freeze()
                await tx.fetch("SELECT 2")  # never answered: cancelled, then ROLLBACK
        assert block.cancelled_caught
        # the block's 0.3 s, then ROLLBACK and the release, each bounded by CLEANUP_S
        assert time.monotonic() - started < 0.3 + 2 * CLEANUP_S + 1.0


async def test_a_commit_without_an_answer_is_unavailable_in_bounded_time() -> None:
    async with through_forwarder() as (db, forwarder):
        started = time.monotonic()
        with pytest.raises(StorageUnavailable, match="COMMIT"):
            async with db.transaction() as tx:
                await tx.execute("SELECT 1")
                forwarder.freeze()
        assert time.monotonic() - started < 2 * CLEANUP_S + 1.0


async def test_a_lost_connection_is_unavailable() -> None:
    async with through_forwarder() as (db, _):
        with pytest.raises(StorageUnavailable):
            async with db.transaction() as tx:
                pid = await tx.fetchval("SELECT pg_backend_pid()")
                await db.execute("SELECT pg_terminate_backend(:pid)", {"pid": pid})
                await trio.sleep(0.2)  # the server's FATAL reaches the client
                await tx.fetch("SELECT 1")
        assert await db.fetchval("SELECT 3") == 3  # the pool replaced the connection


async def test_misusing_a_connection_is_a_bug_not_unavailable() -> None:
    async with through_forwarder() as (db, _):
        with pytest.raises(ExceptionGroup) as raised:
            async with db.transaction() as tx:
                async with trio.open_nursery() as nursery:
                    for _ in range(2):
                        nursery.start_soon(tx.fetch, "SELECT pg_sleep(0.2)")
        assert raised.group_contains(asyncpg.InterfaceError, match="another operation")
        assert not raised.group_contains(StorageUnavailable)


async def test_statement_errors_give_their_connection_back_to_the_pool() -> None:
    async with through_forwarder() as (db, _):  # a pool of 2
        db.timeout_s = 2.0
        for _ in range(5):  # more failures than the pool has connections
            with pytest.raises(asyncpg.UndefinedTableError):
                await db.fetch("SELECT * FROM no_such_table")
        assert await db.fetchval("SELECT 1") == 1
