"""Timeouts for connections waiting for their next request, without a cancel scope each wait.

Entering and leaving a Trio cancel scope with a deadline costs about 6 µs of CPU on this
machine (`python -m bench.cancel_scope_cost`), and a keep-alive connection waits for a next
request head once per request: that was the second-largest fixed cost of a request after the
socket calls. So a connection is served inside one cancel scope for its whole life, and while it
waits idle it is only noted here with the Trio time it may wait until; a sweep every `tick_s`
cancels the scopes of those past it, and `cancel_all` those of every idle connection (a drain).
A wait then costs a clock read and a dict entry, and a timeout fires at most `tick_s` late: the
tick is a quarter of the shortest timeout watched, at most 1 s.

The waiter must call `done` as soon as its wait returns, before any checkpoint: a sweep that ran
between the wait's end and `done` cancelled the scope although the request had arrived, and
`done` says so (True), so the connection is closed as if it had timed out instead of being
cancelled later, halfway through that request.
"""

from __future__ import annotations

import trio

MAX_TICK_S = 1.0


class IdleWatch:
    def __init__(self, shortest_timeout_s: float) -> None:
        self.tick_s = min(MAX_TICK_S, shortest_timeout_s / 4)
        self._until: dict[trio.CancelScope, float] = {}

    def __len__(self) -> int:
        """Connections waiting now."""
        return len(self._until)

    def wait(self, scope: trio.CancelScope, timeout_s: float) -> None:
        """`scope`'s connection starts waiting: cancel it if still waiting in `timeout_s`."""
        self._until[scope] = trio.current_time() + timeout_s

    def done(self, scope: trio.CancelScope) -> bool:
        """The wait returned; True if a sweep or a drain cancelled `scope` meanwhile."""
        self._until.pop(scope, None)
        return scope.cancel_called

    def cancel_all(self) -> None:
        """Cancel every waiting connection (the server drains)."""
        scopes = list(self._until)
        self._until.clear()
        for scope in scopes:
            scope.cancel()

    def sweep(self) -> None:
        """Cancel the connections waiting past their time."""
        now = trio.current_time()
        late = [scope for scope, until in self._until.items() if until <= now]
        for scope in late:
            del self._until[scope]
            scope.cancel()

    async def run(self) -> None:
        """Sweep every `tick_s`, until cancelled."""
        while True:
            await trio.sleep(self.tick_s)
            self.sweep()
