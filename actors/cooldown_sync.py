"""Deployments' cooldowns shared across instances through Redis (docs/routing.md).

Each instance keeps its own breakers (services/routing/breaker.py). When one trips here, the
attempt loop tells this actor (`tripped`); every `interval_s` the actor writes the trips since
its last tick to Redis (`<prefix>cooldown:<model>:<deployment>` = the wall-clock end of the
rest, expiring with it) and reads every deployment's key in one MGET, resting here the ones
another instance tripped. A trip on one instance is so honoured by the others within two
ticks (0.5 s by default); Redis sees one MGET per tick per instance, and one SET per trip.

Redis failing changes nothing but the sharing: each instance goes on with its own breakers
(the failure is logged, at most once a minute), and the next tick tries again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import coredis
import trio

from actors.base import Actor
from actors.errors import RedisUnavailable, redis_call
from actors.throttled_log import ThrottledWarning
from services.routing.balancer import Balancer, Target

log = logging.getLogger("gateway.routing")
DEFAULT_INTERVAL_S = 0.25


class CooldownSync(Actor):
    kind = "background"

    def __init__(
        self,
        client: coredis.Redis[Any],
        balancers: Sequence[tuple[str, Balancer]],
        *,
        prefix: str = "gw:",
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = 1.0,
    ) -> None:
        self.name = "cooldown-sync"
        self._client = client
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._targets: list[Target] = []
        self._keys: list[str] = []
        self._key_of: dict[int, str] = {}  # id(target) -> its key
        for model_id, balancer in balancers:
            for target in balancer.targets:
                key = f"{prefix}cooldown:{model_id}:{target.name}"
                self._targets.append(target)
                self._keys.append(key)
                self._key_of[id(target)] = key
        self._tripped: dict[int, Target] = {}
        self._failed = ThrottledWarning(log, "sharing cooldowns through Redis failed: %s", 60.0)
        self.shared = 0  # trips written to Redis
        self.honoured = 0  # rests taken from another instance's trip

    def tripped(self, target: Target) -> None:
        """A breaker tripped here: written to Redis at the next tick (no I/O now)."""
        if id(target) in self._key_of:
            self._tripped[id(target)] = target

    def statistics(self) -> dict[str, object]:
        return {
            "deployments": len(self._targets),
            "pending": len(self._tripped),  # trips not written yet
            "shared": self.shared,
            "honoured": self.honoured,
        }

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await trio.sleep(self._interval_s)
            try:
                await self.tick()
            except RedisUnavailable as exc:
                self._failed(exc)

    async def tick(self) -> None:
        """Write this instance's new trips, then take the others'."""
        tripped, self._tripped = self._tripped, {}
        try:
            with redis_call(self._timeout_s):
                for target in tripped.values():
                    rest_s = target.breaker.open_until - trio.current_time()
                    if rest_s > 0:
                        until = time.time() + rest_s
                        await self._client.set(
                            self._key_of[id(target)], repr(until), px=max(1, int(rest_s * 1000))
                        )
                        self.shared += 1
                values = await self._client.mget(self._keys) if self._keys else []
        except RedisUnavailable:
            for key, target in tripped.items():  # not shared yet: the next tick tries again
                self._tripped.setdefault(key, target)
            raise
        wall, now = time.time(), trio.current_time()
        for target, value in zip(self._targets, values, strict=True):
            if value is None:
                continue
            try:
                until = float(value)
            except ValueError:
                continue
            if until > wall and target.breaker.rest_until(now + (until - wall)):
                self.honoured += 1
