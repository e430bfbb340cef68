"""Waiting in tests for state that another task, thread or process changes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

LIMIT_S = 10.0


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll `predicate` until true; fail after LIMIT_S seconds. For state we cannot await
    directly (a server's log, an actor under supervision, another process)."""
    with trio.fail_after(LIMIT_S):
        while not predicate():  # noqa: ASYNC110 - no event to wait on for such state
            await trio.sleep(0.002)


async def wait_until_async(
    predicate: Callable[[], Awaitable[bool]], limit_s: float = LIMIT_S
) -> None:
    """`wait_until` for a predicate that must await (a database, a blob store)."""
    with trio.fail_after(limit_s):
        while not await predicate():  # noqa: ASYNC110 - no event to wait on for such state
            await trio.sleep(0.02)
