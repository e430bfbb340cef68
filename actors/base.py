"""The Actor base class: the one interface a supervisor needs from a long-lived task.

An actor owns its state and runs until it returns (it retires) or is cancelled (it is stopped).
This module defines only what an actor is; restarting, naming rules and the tree live in
`actors.supervisor`, mailboxes in `actors.inbox`. It must not import either of them.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import trio


class Actor(abc.ABC):
    """A long-lived supervised task that owns its state.

    Subclasses set ``self.name`` (unique among siblings under one supervisor) and implement
    `run`. Anything that must outlive a crash (an `Inbox`, counters) belongs on the instance,
    because a restart calls `run` again on the same object.
    """

    name: str
    # What `[actors.<kind>]` table tunes this actor (actors/settings.py); the admin tree and
    # /metrics group by it.
    kind: ClassVar[str] = "background"

    @abc.abstractmethod
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Do the actor's work; call ``task_status.started()`` once ready to serve.

        Returning normally means "I am done": the supervisor removes the actor and does not
        restart it. Raising an `Exception` means "I crashed": the supervisor restarts it with
        backoff. Cancellation (the supervisor is stopping, or ``stop(name)``) arrives as
        `trio.Cancelled` at any checkpoint and must be allowed to propagate.
        """

    def statistics(self) -> dict[str, object]:
        """Live numbers for the admin tree; JSON-able values only. Empty by default."""
        return {}

    def inbox_depth(self) -> int:
        """Messages waiting in this actor's inbox; actors with an `Inbox` return its depth."""
        return 0

    def inbox_capacity(self) -> int | None:
        """The inbox's capacity, or None for actors without one."""
        return None

    def handling(self) -> tuple[int, float | None]:
        """Messages handled so far and the 99th percentile of their handling time in seconds
        (None before the first); actors with an `Inbox` return its `handling()`."""
        return 0, None

    def __repr__(self) -> str:
        # getattr: repr must work even on a half-initialised instance (e.g. in a traceback).
        name = getattr(self, "name", "?")
        capacity = self.inbox_capacity()
        inbox = "" if capacity is None else f" inbox={self.inbox_depth()}/{capacity}"
        return f"<{type(self).__name__} name={name!r}{inbox}>"
