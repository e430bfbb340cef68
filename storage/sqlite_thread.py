"""A dedicated OS thread that owns one SQLite connection and runs calls on it in order.

Trio tasks submit a callable and sleep until the thread reschedules them with the outcome.
A submitted call cannot be cancelled: SQLite statements here are short, and abandoning one
half-way would leave the connection in an unknown transaction state. Cancellation is delivered
at the caller's next checkpoint after the call finished.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

T = TypeVar("T")
_Job = tuple[Callable[[sqlite3.Connection], Any], Callable[[outcome.Outcome[Any]], None]]


class ConnectionThread:
    def __init__(self, conn: sqlite3.Connection, name: str) -> None:
        self._conn = conn
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self.calls = 0

    def __repr__(self) -> str:
        return f"<ConnectionThread {self._thread.name} calls={self.calls}>"

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                break
            fn, deliver = job
            deliver(outcome.capture(fn, self._conn))
        self._conn.close()

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        token = trio.lowlevel.current_trio_token()
        task = trio.lowlevel.current_task()

        def deliver(result: outcome.Outcome[Any]) -> None:
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        self.calls += 1
        self._jobs.put((fn, deliver))

        def abort(_: Any) -> trio.lowlevel.Abort:
            return trio.lowlevel.Abort.FAILED  # the call runs to completion; see module docstring

        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    async def aclose(self) -> None:
        """Finish queued calls, close the connection and join the thread."""
        self._jobs.put(None)
        await trio.to_thread.run_sync(self._thread.join)
