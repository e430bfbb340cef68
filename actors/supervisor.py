"""The supervisor: runs child actors, restarts crashed ones with backoff, exposes the tree.

Crash means "``run()`` raised an `Exception`" (an `ExceptionGroup` of Exceptions included).
Anything else that is a `BaseException` (`trio.Cancelled`, `KeyboardInterrupt`, a group holding
one) is never caught here: only ``except Exception`` appears in this module, so cancellation and
interpreter exits always reach the scope that owns them. Backoff sleeps use the Trio clock.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import trio

from actors.base import Actor
from actors.errors import GaveUp
from actors.settings import BACKOFF_MULTIPLIER, ActorSettings, GiveUp

_log = logging.getLogger("gateway.actors")

State = Literal["starting", "running", "backoff", "stopped", "failed"]

_ERROR_LIMIT = 200


@dataclass(frozen=True)
class RestartPolicy:
    """How a crashed child is restarted. Times are seconds on the Trio clock.

    Backoff starts at ``initial_backoff`` and is multiplied per restart up to ``max_backoff``;
    a run lasting ``restart_window`` or longer starts it again from ``initial_backoff``. At most
    ``max_restarts`` restarts fall within any ``restart_window`` (None: no limit): one more
    crash and the supervisor gives up on the child as ``on_give_up`` says — "unhealthy": the
    child stays down as "failed" (the instance reports not ready); "escalate": the supervisor
    itself crashes with `GaveUp`, and its parent's policy decides. ``temporary`` children (a
    stream's relay) are never restarted: a crash ends them like a return, after logging it.
    ``ActorSnapshot.restarts`` is the lifetime total.
    """

    initial_backoff: float = 0.1
    max_backoff: float = 30.0
    multiplier: float = BACKOFF_MULTIPLIER
    restart_window: float = 60.0
    max_restarts: int | None = None
    on_give_up: GiveUp = "unhealthy"
    temporary: bool = False

    @classmethod
    def from_settings(cls, settings: ActorSettings) -> RestartPolicy:
        return cls(
            initial_backoff=settings.initial_backoff_s,
            max_backoff=settings.max_backoff_s,
            restart_window=settings.restart_window_s,
            max_restarts=settings.max_restarts,
            on_give_up=settings.on_give_up,
        )


# A module constant rather than a call in the signature (ruff B008); the policy is immutable.
# For a child whose kind has no settings (a nested supervisor): ActorSettings' defaults, so
# that it too gives up on a crash loop rather than restarting forever.
_DEFAULT_POLICY = RestartPolicy.from_settings(ActorSettings())


@dataclass(frozen=True)
class ActorSnapshot:
    """One node of the supervision tree, as shown by ``/v1/admin/actors``."""

    name: str
    kind: str  # the `[actors.<kind>]` that tunes it
    type: str  # its class
    state: str
    restarts: int
    inbox_depth: int
    last_error: str | None
    statistics: dict[str, object]
    children: tuple[ActorSnapshot, ...] = ()
    inbox_capacity: int | None = None
    messages_handled: int = 0
    handling_p99_s: float | None = None
    backoff_s: float | None = None  # while in "backoff": the wait before the next restart

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "type": self.type,
            "state": self.state,
            "restarts": self.restarts,
            "inbox_depth": self.inbox_depth,
            "inbox_capacity": self.inbox_capacity,
            "messages_handled": self.messages_handled,
            "handling_p99_s": self.handling_p99_s,
            "backoff_s": self.backoff_s,
            "last_error": self.last_error,
            "statistics": dict(self.statistics),
            "children": [child.to_json() for child in self.children],
        }


@dataclass(eq=False)
class Child:
    """The supervisor's record of one child. Outlives restarts; dropped when the child exits.
    `Supervisor.start` returns it: `scope` cancels the child (every run of it), `exited` is set
    once its task has ended, so a caller that owns a temporary child (a stream's relay) need
    not keep a scope and an event of its own."""

    name: str
    actor: Actor
    policy: RestartPolicy
    state: State = "starting"
    restarts: int = 0
    last_error: str | None = None
    backoff_s: float | None = None  # the wait before the next restart, while in "backoff"
    started_once: bool = False
    # Created up front so stop() can cancel a child whose task has not begun running yet.
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    exited: trio.Event = field(default_factory=trio.Event)


class _RunStatus:
    """The ``task_status`` given to one ``run()`` call.

    It marks the child running and, on the first run only, forwards readiness to the caller of
    `Supervisor.start`; restarts run in the supervisor's nursery, so nobody else is waiting.
    """

    def __init__(self, child: Child, outer: trio.TaskStatus[None] | None) -> None:
        self._child = child
        self._outer = outer
        self._called = False

    def started(self, value: None = None) -> None:
        if self._called:
            raise RuntimeError("called 'started' twice on the same task status")
        self._called = True
        self._child.state = "running"
        self._child.started_once = True
        if self._outer is not None:
            self._outer.started()


def _describe(exc: BaseException) -> str:
    # A crash inside an actor's own nursery arrives wrapped; the leaf is what an operator needs.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())[:_ERROR_LIMIT]


class Supervisor(Actor):
    """Runs child actors in its own nursery and restarts crashed ones with backoff.

    It never swallows `trio.Cancelled`. A Supervisor is itself an Actor, so supervisors nest;
    a nested one that is restarted comes back empty (its children are started by callers).
    """

    kind = "supervisor"

    def __init__(
        self,
        name: str = "root",
        *,
        default_policy: RestartPolicy = _DEFAULT_POLICY,
        settings: Mapping[str, ActorSettings] | None = None,
    ) -> None:
        self.name = name
        self._default_policy = default_policy
        # Per actor kind (`Actor.kind`), from `[actors.<kind>]`: a child started without an
        # explicit policy gets its kind's; nested supervisors started here inherit the map.
        self.kind_settings: Mapping[str, ActorSettings] = settings or {}
        self._nursery: trio.Nursery | None = None
        # Live children plus "failed" ones, kept so the tree and /healthz show them.
        self._children: dict[str, Child] = {}
        # Restarts per actor kind since this tree started, never decreasing (a retired actor's
        # are kept): one map shared by the nested supervisors started here (/metrics).
        self.restart_counts: dict[str, int] = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the nursery, report ready, then run until cancelled.

        Cancellation cancels every child and waits for them to exit before re-raising.
        """
        if self._nursery is not None:
            raise RuntimeError(f"supervisor {self.name!r} is already running")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self._children.clear()

    async def start(self, actor: Actor, *, policy: RestartPolicy | None = None) -> Child:
        """Start ``actor`` under supervision; return its record once it called
        ``task_status.started()``.

        If that first run raises before being ready, the exception propagates here and the
        actor is not kept. Cancelling this call before the actor is ready cancels the actor.
        Raises `ValueError` for a duplicate name, `RuntimeError` if the supervisor is not running.
        """
        nursery = self._running_nursery()
        child = self._register(actor, policy)
        try:
            await nursery.start(self._supervise, child, True)
        finally:
            if not child.started_once:
                self._forget(child)
        return child

    def start_soon(self, actor: Actor, *, policy: RestartPolicy | None = None) -> None:
        """Like `start` without waiting; a failing first run is treated as a crash (restarted)."""
        nursery = self._running_nursery()
        nursery.start_soon(self._supervise, self._register(actor, policy), False)

    def get(self, name: str) -> Actor | None:
        """The live (not "failed") child called ``name``, if any."""
        child = self._children.get(name)
        return None if child is None or child.state == "failed" else child.actor

    def children(self) -> list[Actor]:
        """The live (not "failed") children, in start order."""
        return [c.actor for c in self._children.values() if c.state != "failed"]

    async def stop(self, name: str) -> None:
        """Cancel the child ``name``, wait until it has exited, and remove it. No-op if unknown.

        Also removes a "failed" child. If this call is cancelled while waiting, the child has
        still been told to stop and finishes on its own.
        """
        child = self._children.get(name)
        if child is None:
            return
        if child.state == "failed":
            self._forget(child)  # its task has already ended; only the tombstone is left
            return
        child.scope.cancel()
        # The child's own task removes its record as it exits, even if this wait is cancelled.
        await child.exited.wait()

    def policy_for(self, actor: Actor) -> RestartPolicy:
        """The policy a child gets when none is given: its kind's settings, else the default."""
        settings = self.kind_settings.get(actor.kind)
        return self._default_policy if settings is None else RestartPolicy.from_settings(settings)

    def snapshot(self) -> ActorSnapshot:
        return ActorSnapshot(
            name=self.name,
            kind=self.kind,
            type=type(self).__name__,
            state="running" if self._nursery is not None else "stopped",
            restarts=0,
            inbox_depth=self.inbox_depth(),
            last_error=None,
            statistics=self.statistics(),
            children=tuple(self._snapshot_child(c) for c in self._children.values()),
        )

    def running(self) -> bool:
        """True between `run()` reporting ready and its end."""
        return self._nursery is not None

    def failed(self) -> list[Actor]:
        """The direct children past their restart limit ("failed")."""
        return [c.actor for c in self._children.values() if c.state == "failed"]

    def all_running(self) -> bool:
        """True when this supervisor runs and every child, recursively, is "running"."""
        if self._nursery is None:
            return False
        for child in self._children.values():
            if child.state != "running":
                return False
            if isinstance(child.actor, Supervisor) and not child.actor.all_running():
                return False
        return True

    def statistics(self) -> dict[str, object]:
        records = self._children.values()
        return {
            "children": len(records),
            "failed": sum(1 for c in records if c.state == "failed"),
            "restarts": sum(c.restarts for c in records),
        }

    # -- internals --------------------------------------------------------------------------

    def _running_nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError(f"supervisor {self.name!r} is not running; start run() first")
        return self._nursery

    def _register(self, actor: Actor, policy: RestartPolicy | None) -> Child:
        existing = self._children.get(actor.name)
        # A failed child is a tombstone for the tree; starting a new one in its place is allowed
        # so per-key spawners can recover without a separate stop().
        if existing is not None and existing.state != "failed":
            raise ValueError(f"supervisor {self.name!r} already has a child named {actor.name!r}")
        if isinstance(actor, Supervisor):
            if not actor.kind_settings:
                actor.kind_settings = self.kind_settings
            if actor.restart_counts is not self.restart_counts:
                for kind, count in actor.restart_counts.items():  # counted before it joined
                    self.restart_counts[kind] = self.restart_counts.get(kind, 0) + count
                actor.restart_counts = self.restart_counts
        child = Child(actor.name, actor, policy or self.policy_for(actor))
        self._children[actor.name] = child
        return child

    def _forget(self, child: Child) -> None:
        if self._children.get(child.name) is child:
            del self._children[child.name]

    def _snapshot_child(self, child: Child) -> ActorSnapshot:
        actor = child.actor
        handled, p99 = actor.handling()
        return ActorSnapshot(
            name=child.name,
            kind=actor.kind,
            type=type(actor).__name__,
            state=child.state,
            restarts=child.restarts,
            inbox_depth=actor.inbox_depth(),
            last_error=child.last_error,
            statistics=dict(actor.statistics()),
            children=actor.snapshot().children if isinstance(actor, Supervisor) else (),
            inbox_capacity=actor.inbox_capacity(),
            messages_handled=handled,
            handling_p99_s=p99,
            backoff_s=child.backoff_s if child.state == "backoff" else None,
        )

    async def _supervise(
        self,
        child: Child,
        raise_first: bool,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            with child.scope:
                if child.policy.temporary:  # one run, no restart loop (a task per stream)
                    await self._run_once(child, raise_first, task_status)
                else:
                    await self._restart_loop(child, raise_first, task_status)
        finally:
            child.exited.set()
            if child.state != "failed":
                child.state = "stopped"
                self._forget(child)

    async def _run_once(
        self, child: Child, raise_first: bool, task_status: trio.TaskStatus[None]
    ) -> None:
        """A temporary child's only run: a crash is logged and ends it like a return."""
        try:
            await child.actor.run(task_status=_RunStatus(child, task_status))
        except Exception as exc:
            if raise_first and not child.started_once:
                raise  # belongs to start()'s caller, who decides what to do
            child.last_error = error = _describe(exc)
            _log.warning("actor %s crashed (%s); not restarted (temporary)", child.name, error)

    async def _restart_loop(
        self, child: Child, raise_first: bool, task_status: trio.TaskStatus[None]
    ) -> None:
        policy = child.policy
        backoff = policy.initial_backoff
        recent: deque[float] = deque()  # restart times within the last restart_window
        outer: trio.TaskStatus[None] | None = task_status
        while True:
            child.state = "starting"
            began = trio.current_time()
            try:
                await child.actor.run(task_status=_RunStatus(child, outer))
            except Exception as exc:
                if raise_first and not child.started_once:
                    raise  # belongs to start()'s caller, who decides what to do
                error = _describe(exc)
            else:
                return  # returned normally: the actor retired
            outer = None
            child.last_error = error
            now = trio.current_time()
            if now - began >= policy.restart_window:
                backoff = policy.initial_backoff
            while recent and recent[0] <= now - policy.restart_window:
                recent.popleft()
            if policy.max_restarts is not None and len(recent) >= policy.max_restarts:
                msg = "actor %s failed for good after %d restarts in %gs: %s"
                _log.warning(msg, child.name, len(recent), policy.restart_window, error)
                if policy.on_give_up == "escalate":
                    raise GaveUp(f"actor {child.name} failed for good: {error}")
                child.state = "failed"
                return
            recent.append(now)
            child.restarts += 1
            kind = child.actor.kind
            self.restart_counts[kind] = self.restart_counts.get(kind, 0) + 1
            child.state = "backoff"
            child.backoff_s = backoff
            msg = "actor %s crashed (%s); restart %d in %.3gs"
            _log.warning(msg, child.name, error, child.restarts, backoff)
            await trio.sleep(backoff)
            backoff = min(backoff * policy.multiplier, policy.max_backoff)
