"""Liveness and readiness of one instance (`/livez`, `/readyz`; docs/operations.md, "Health").

Live: the process and its supervisors run. Ready: the instance can serve inference, which
needs neither the database nor Redis (credentials are cached, usage is buffered), so neither is
probed. What makes an instance not ready is a named reason:

    draining        SIGINT/SIGTERM received: in-flight requests finish, new ones go elsewhere
    actor:NAME      an actor past its restart limit ("failed"); one in backoff is not a reason
                    (it is retrying, and an outage of the database must not take every
                    instance out at once, nor keep them out while backoffs run down)
    anything set    `Readiness.set(name, detail)` by other code (e.g. a master key being
                    rotated), cleared with `Readiness.clear(name)`

Checks are cheap and local (no I/O): a probe answers at once whatever the database does.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.supervisor import Supervisor

# A check returns why the instance is not ready, or None.
Check = Callable[[], str | None]


class Readiness:
    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._set: dict[str, str] = {}
        self._checks: dict[str, Check] = {"actors": lambda: _failed_actors(supervisor)}

    def set(self, name: str, detail: str) -> None:
        """Mark the instance not ready for `name` (replacing that name's earlier detail)."""
        self._set[name] = detail

    def clear(self, name: str) -> None:
        self._set.pop(name, None)

    def add_check(self, name: str, check: Check) -> None:
        """A reason computed on every probe (`check()` must not block or do I/O)."""
        self._checks[name] = check

    def reasons(self) -> list[str]:
        """Why the instance is not ready, as `name: detail`; empty when it is ready."""
        found = [f"{name}: {detail}" for name, detail in self._set.items()]
        for name, check in self._checks.items():
            detail = check()
            if detail is not None:
                found.append(f"{name}: {detail}")
        return found

    def live(self) -> bool:
        """The root supervisor and every supervisor under it run."""
        return _supervisors_run(self._supervisor)


def _failed_actors(supervisor: Supervisor) -> str | None:
    failed = _failed(supervisor)
    return None if not failed else "failed for good: " + ", ".join(failed)


def _failed(supervisor: Supervisor, prefix: str = "") -> list[str]:
    """Failed actors under `supervisor`, as paths (`parent/child`), through live supervisors."""
    found = [prefix + actor.name for actor in supervisor.failed()]
    for actor in supervisor.children():
        if isinstance(actor, Supervisor):
            found.extend(_failed(actor, f"{prefix}{actor.name}/"))
    return found


def _supervisors_run(supervisor: Supervisor) -> bool:
    """`supervisor` runs and no supervisor under it failed for good (one in backoff is
    restarting: still live)."""
    if not supervisor.running():
        return False
    if any(isinstance(actor, Supervisor) for actor in supervisor.failed()):
        return False
    return all(
        _supervisors_run(actor)
        for actor in supervisor.children()
        if isinstance(actor, Supervisor) and actor.running()
    )
