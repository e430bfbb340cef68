"""The shielded, bounded flush that actors writing in batches share (the accountant's usage rows,
the event writer's events).

A flush is never cancelled mid-write: cancelling asyncpg inside a transaction at shutdown left
its ROLLBACK waiting forever on PostgreSQL. So a stop (or restart) waits for the flush in
progress, but only up to a limit, after which the batch stays queued for a retry (or is
reported lost, when stopping).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio


async def flush_shielded(flush: Callable[[], Awaitable[None]], limit_s: float) -> bool:
    """Run `flush` shielded from cancellation for at most `limit_s`; False if it was cut off."""
    with trio.CancelScope(shield=True):
        with trio.move_on_after(limit_s) as limit:
            await flush()
    return not limit.cancelled_caught
