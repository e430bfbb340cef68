"""Waiting in tests for state that another task, thread or process changes."""

from __future__ import annotations

from collections.abc import Callable

import trio

LIMIT_S = 10.0


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll `predicate` until true; fail after LIMIT_S seconds. For state we cannot await
    directly (a server's log, an actor under supervision, another process)."""
    with trio.fail_after(LIMIT_S):
        while not predicate():  # noqa: ASYNC110 - no event to wait on for such state
            await trio.sleep(0.002)
