"""How an operator tunes one kind of actor: the values of one `[actors.<kind>]` config table.

This module only describes the knobs; the supervisor (actors/supervisor.py) applies the restart
ones, `Inbox` (actors/inbox.py) the inbox ones, per-key spawners `idle_retire_s`. The config
loader turns each `[actors.<kind>]` table into an `ActorSettings` (unknown keys refused), merged
over `DEFAULTS[kind]`, so one place holds every default.

    inbox_capacity      messages an actor's inbox holds before `overflow` applies
    overflow            "wait": the sender waits (back-pressure);
                        "reject": the sender gets `InboxFull` at once (a 503 with Retry-After);
                        "drop_oldest": the oldest waiting message is dropped (only for
                        fire-and-forget messages, whose sender needs no answer)
    initial_backoff_s   wait before the first restart of a crashed actor; doubles per restart
    max_backoff_s       ... up to this
    max_restarts        restarts allowed within `restart_window_s`; one more crash and the
    restart_window_s    supervisor gives up (`on_give_up`). The backoffs of `max_restarts`
                        restarts in a row must fit in the window (`give_up_after_s`), else an
                        actor that crashes on every run would restart forever: refused
    on_give_up          "unhealthy": the actor stays down and the instance reports unhealthy
                        (/readyz 503); "escalate": the actor's supervisor crashes too, and its
                        own parent decides
    idle_retire_s       a per-key actor (rate limiter, ...) with no message for this long retires
"""

from __future__ import annotations

from typing import Literal

import msgspec

Overflow = Literal["wait", "reject", "drop_oldest"]
GiveUp = Literal["unhealthy", "escalate"]


class ActorSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    inbox_capacity: int = msgspec.field(default=1024)
    overflow: Overflow = "wait"
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 30.0
    max_restarts: int = 10
    restart_window_s: float = 120.0  # the 10 backoffs above add up to 81.1 s: it can give up
    on_give_up: GiveUp = "unhealthy"
    idle_retire_s: float = 300.0

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        """What is wrong with these values, one sentence per key (empty when valid)."""
        out = []
        if self.inbox_capacity < 1:
            out.append(f"inbox_capacity must be at least 1, got {self.inbox_capacity}")
        if self.initial_backoff_s < 0:
            out.append(f"initial_backoff_s must be >= 0, got {self.initial_backoff_s}")
        if self.max_backoff_s < self.initial_backoff_s:
            out.append(
                f"max_backoff_s ({self.max_backoff_s}) must be >= initial_backoff_s"
                f" ({self.initial_backoff_s})"
            )
        if self.max_restarts < 0:
            out.append(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.restart_window_s <= 0:
            out.append(f"restart_window_s must be > 0, got {self.restart_window_s}")
        if self.restart_window_s > 0 and self.give_up_after_s() >= self.restart_window_s:
            out.append(
                f"max_restarts ({self.max_restarts}) restarts can never fall within"
                f" restart_window_s ({self.restart_window_s}): their backoffs alone take"
                f" {self.give_up_after_s():g} s, so an actor that crashes on every run would"
                " restart forever; raise restart_window_s, or lower max_restarts or the backoffs"
            )
        if self.idle_retire_s <= 0:
            out.append(f"idle_retire_s must be > 0, got {self.idle_retire_s}")
        return out

    def give_up_after_s(self) -> float:
        """How long an actor that crashes at once on every run is restarted before the
        supervisor gives up: its first `max_restarts` backoffs (the supervisor doubles each,
        up to `max_backoff_s`; actors/supervisor.py)."""
        total, backoff = 0.0, self.initial_backoff_s
        for done in range(self.max_restarts):
            if backoff >= self.max_backoff_s or backoff == 0:  # the rest are all the same
                return total + (self.max_restarts - done) * backoff
            total += backoff
            backoff = min(backoff * BACKOFF_MULTIPLIER, self.max_backoff_s)
        return total


BACKOFF_MULTIPLIER = 2.0


# Every actor kind an operator can tune, with its defaults. A kind not listed here is refused
# by the config loader. Kinds reached by fire-and-forget messages only may use "drop_oldest".
DEFAULTS: dict[str, ActorSettings] = {
    "rate_limiter": ActorSettings(overflow="reject"),
    "accountant": ActorSettings(overflow="wait", inbox_capacity=4096),
    "auto_replenish": ActorSettings(overflow="drop_oldest", inbox_capacity=256),
    "batch_writer": ActorSettings(overflow="wait", inbox_capacity=8192),
    # Listed for the tree's kind only: no knob applies to a relay (_NOT_FOR_KIND below).
    "stream_relay": ActorSettings(max_restarts=0),
    # Deliveries back off longer: a receiver that is down stays down for a while. Their 10
    # backoffs take 303 s: the window is longer, so that a crash loop gives up.
    "webhook_delivery": ActorSettings(
        inbox_capacity=64, initial_backoff_s=1.0, max_backoff_s=60.0, restart_window_s=600.0
    ),
    "background": ActorSettings(),  # janitors, watchers, pollers
}
# Not "accountant": its settlements are fire-and-forget too, but they carry money, so its
# usage-rows writer keeps every one (`BatchWriter(keep_all=True)` refuses "drop_oldest").
FIRE_AND_FORGET_KINDS = frozenset({"auto_replenish", "batch_writer"})

# Knobs that cannot apply to a kind, and why: the config refuses them (file, key, reason).
_NOT_FOR_KIND: dict[str, tuple[frozenset[str], str]] = {
    "stream_relay": (
        frozenset(ActorSettings.__struct_fields__),
        "a stream relay has no inbox (it writes to its client itself: a slow client slows its"
        " upstream reads) and is never restarted nor retired (a broken stream cannot resume);"
        " no [actors] knob applies to it",
    ),
}


def inapplicable(kind: str) -> tuple[frozenset[str], str]:
    """The knobs of `[actors.<kind>]` that cannot apply to that kind, and why (none: empty)."""
    return _NOT_FOR_KIND.get(kind, (frozenset(), ""))
