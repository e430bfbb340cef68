"""CPU cost of a timeout on a wait, the ways the server and the upstream client can take one.

    python -m bench.cancel_scope_cost [N]

Inside `trio.run`, N (default 100,000) times each, best of five, in µs: entering and leaving
`trio.move_on_after` (a cancel scope with a deadline: what a wait with a timeout costs when
it is taken per request), a cancel scope without a deadline, moving the deadline of a scope
already entered (set, then back to infinity), and the idle watch's note-and-forget
(gateway/server/idle.py: a clock read and a dict entry). None of them waits: this is the
bookkeeping around a wait, paid once per request on a keep-alive connection.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Awaitable, Callable

import trio

from gateway.server.idle import IdleWatch


async def _best_us(work: Callable[[int], Awaitable[None]], n: int) -> float:
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        await work(n)
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


async def _move_on_after(n: int) -> None:
    for _ in range(n):
        with trio.move_on_after(10):  # noqa: ASYNC100 (the scope's own cost is measured)
            pass


async def _bare_scope(n: int) -> None:
    for _ in range(n):
        with trio.CancelScope():  # noqa: ASYNC100 (the scope's own cost is measured)
            pass


async def _moved_deadline(n: int) -> None:
    with trio.CancelScope() as scope:  # noqa: ASYNC100 (moving its deadline is measured)
        for _ in range(n):
            scope.deadline = trio.current_time() + 10
            scope.deadline = math.inf


async def _idle_watch(n: int) -> None:
    watch = IdleWatch(10.0)
    scope = trio.CancelScope()
    for _ in range(n):
        watch.wait(scope, 10.0)
        watch.done(scope)


async def main(n: int) -> None:
    for name, work in (
        ("move_on_after (enter + exit)", _move_on_after),
        ("CancelScope() without deadline", _bare_scope),
        ("deadline moved and reset", _moved_deadline),
        ("IdleWatch wait + done", _idle_watch),
    ):
        print(f"{name:<34}{await _best_us(work, n):>8.2f} µs")


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
