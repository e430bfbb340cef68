"""Fixtures for the webhook actors: a TLS CA, an HTTPS receiver on loopback, a MockClock."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from tests.webhook_receiver import Receiver, ReceiverTLS, make_tls, serve_receiver


@pytest.fixture
def tls() -> ReceiverTLS:
    return make_tls()


async def start_receiver(nursery: trio.Nursery, tls: ReceiverTLS | None) -> Receiver:
    server = tls.server if tls is not None else None
    receiver: Receiver = await nursery.start(
        lambda task_status: serve_receiver(tls=server, task_status=task_status)
    )
    return receiver


@pytest.fixture
async def receiver(tls: ReceiverTLS) -> AsyncIterator[Receiver]:
    async with trio.open_nursery() as nursery:
        yield await start_receiver(nursery, tls)
        nursery.cancel_scope.cancel()


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    """Jumps to the next deadline once everything has waited 50 ms of real time. Not 0: a
    database call waits on a thread (SQLite) or a socket (PostgreSQL, whose asyncpg timers
    run on this clock too), and a 0 threshold would jump during such a wait — to the attempt
    timeout, a retry or asyncpg's own connect timeout — while nothing is actually idle."""
    return trio.testing.MockClock(autojump_threshold=0.05)
