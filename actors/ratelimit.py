"""The per-key rate limiter: a supervisor (`RateLimiter`, "rate-limiters") with one actor per
active key (`KeyLimiter`, kind "rate_limiter"), spawned on the key's first request and retired
after `idle_retire_s` without one ([actors.rate_limiter]).

The algorithm (and why GCRA) is in `protocol.ratelimit_headers`. Two backends:

- local (`LocalRateLimiter`): the key's TAT lives in its actor, timed by Trio's clock; exact
  within one process. An admission is O(1) with no I/O, so the caller applies it to the
  actor's state directly — no message, no await — with the same guarantee an inbox gives (one
  thread, nothing interleaves); the actor's task only notices idleness and retires the key
  once its TAT is in the past (a retired key is then as good as new).
- Redis (`RedisRateLimiter`): the TAT lives in Redis, timed by Redis's clock, so every
  instance shares one limit exactly. Admissions are messages to the key's actor, which takes
  everything waiting in its inbox and decides the batch in ONE Lua script (GCRA admitting a
  quantity): a hot key costs one Redis round trip per batch, not per request.

Errors: `RedisUnavailable` — Redis could not decide in time (the caller fails open);
`InboxFull` — a key's inbox with overflow "reject" is full (503 actor_overloaded).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import coredis
import trio

from actors.base import Actor
from actors.errors import RedisUnavailable, redis_call
from actors.inbox import Inbox, Reply
from actors.settings import DEFAULTS, ActorSettings
from actors.supervisor import Supervisor
from protocol.ratelimit_headers import RateDecision, gcra_params_us, gcra_us

_MAX_BATCH = 512  # admissions decided by one script


def _now_us() -> int:
    return int(trio.current_time() * 1_000_000)


class RateLimiter(Supervisor):
    """Admits requests per key; each active key has its own actor, a child of this one."""

    backend: ClassVar[str]

    def __init__(self, settings: ActorSettings = DEFAULTS["rate_limiter"]) -> None:
        super().__init__("rate-limiters")
        self.key_settings = settings
        self._keys: dict[str, KeyLimiter] = {}
        self.admitted = 0
        self.refused = 0
        self.unavailable = 0

    async def admit(self, key_id: str, rpm: int) -> RateDecision:
        """Count one request for ``key_id`` against ``rpm`` (>= 1) and say whether it may go.

        A refused request is not counted against the key. Raises `RedisUnavailable` when the
        store cannot decide, `InboxFull` when the key's inbox refuses, `ValueError` for
        ``rpm < 1``. Needs `run` to be running (the key's actor is started under it).
        """
        if rpm < 1:
            raise ValueError(f"rpm must be >= 1, got {rpm}")
        actor = self._keys.get(key_id)
        if actor is None:
            actor = self._keys[key_id] = self._spawn(key_id)
            self.start_soon(actor)
        decision = await actor.admit(rpm)
        if decision.allowed:
            self.admitted += 1
        else:
            self.refused += 1
        return decision

    @abc.abstractmethod
    def _spawn(self, key_id: str) -> KeyLimiter: ...

    def retire(self, actor: KeyLimiter) -> None:
        """Forget `actor` (it is returning now): the key's next request starts a new one."""
        if self._keys.get(actor.key_id) is actor:
            del self._keys[actor.key_id]

    def tracked_keys(self) -> int:
        return len(self._keys)

    def statistics(self) -> dict[str, object]:
        return {
            **super().statistics(),
            "keys": self.tracked_keys(),
            "admitted": self.admitted,
            "refused": self.refused,
            "unavailable": self.unavailable,
            "backend": self.backend,
        }


class KeyLimiter(Actor):
    """One key's limiter. `run` retires it (returns) after `idle_retire_s` without a request."""

    kind = "rate_limiter"

    def __init__(self, owner: RateLimiter, key_id: str) -> None:
        self.name = f"key:{key_id}"
        self.key_id = key_id
        self.owner = owner
        self.last_used = trio.current_time()

    @abc.abstractmethod
    async def admit(self, rpm: int) -> RateDecision: ...


class LocalRateLimiter(RateLimiter):
    """Each key's TAT (integer microseconds of `trio.current_time`) in its actor."""

    backend = "local"

    def _spawn(self, key_id: str) -> KeyLimiter:
        return LocalKeyLimiter(self, key_id)


class LocalKeyLimiter(KeyLimiter):
    def __init__(self, owner: RateLimiter, key_id: str) -> None:
        super().__init__(owner, key_id)
        self.tat_us: int | None = None
        self.handled = 0

    async def admit(self, rpm: int) -> RateDecision:
        """Applied to this actor's state at once: not a checkpoint, never half-done."""
        now = _now_us()
        decision, tat = gcra_us(self.tat_us or now, now, rpm)
        if decision.allowed:
            self.tat_us = tat
        self.last_used = now / 1_000_000
        self.handled += 1
        return decision

    def handling(self) -> tuple[int, float | None]:
        return self.handled, None  # no message: nothing waits

    def statistics(self) -> dict[str, object]:
        return {"tat_us": self.tat_us}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        idle_s = self.owner.key_settings.idle_retire_s
        while True:
            # Idle long enough, and its TAT past (so forgetting it loses nothing)?
            tat_s = (self.tat_us or 0) / 1_000_000
            until = max(self.last_used + idle_s, tat_s)
            if trio.current_time() >= until:
                self.owner.retire(self)
                return
            await trio.sleep_until(until)


# KEYS[1]: the key's TAT, integer microseconds on the Redis clock. ARGV: the emission interval
# and the tolerance (microseconds, from `gcra_params_us`, so the rounding lives in one place),
# how long to keep the key past its TAT (ms), and how many requests to admit. The first ones
# that fit are admitted (each moves the TAT on by one interval); once one does not fit, none of
# the rest does (a refusal leaves the TAT as it is). Replies {admitted, now, max(TAT, now)
# before} so the caller rebuilds each decision with `gcra_us`. '%d', not tostring: Lua 5.1
# prints numbers with 14 significant digits, which would round a 16-digit TAT.
_ADMIT_LUA = """
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local wanted = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local first = tat
local admitted = 0
while admitted < wanted and tat - now <= tolerance do
  tat = tat + interval
  admitted = admitted + 1
end
if admitted > 0 then
  local ttl = math.ceil((tat - now) / 1000) + tonumber(ARGV[3])
  redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', ttl)
end
return {admitted, now, first}
"""
_KEEP_PAST_TAT_MS = 60_000


@dataclass(slots=True)
class _Ask:
    rpm: int
    reply: Reply[RateDecision]


class RedisRateLimiter(RateLimiter):
    """TATs in Redis under ``f"{prefix}rl:{key_id}"``; a key's actor decides its waiting
    admissions in one script (EVALSHA). Time is Redis's ``TIME`` inside the script, so every
    instance shares one clock. Keys expire a minute after their TAT. The coredis client
    belongs to the caller, who opens and closes it."""

    backend = "redis"

    def __init__(
        self,
        client: coredis.Redis[Any],
        *,
        prefix: str = "gw:",
        timeout_s: float = 0.5,
        settings: ActorSettings = DEFAULTS["rate_limiter"],
    ) -> None:
        super().__init__(settings)
        self.prefix = f"{prefix}rl:"
        self.timeout_s = timeout_s
        self.script = client.register_script(_ADMIT_LUA)
        self.scripts_run = 0

    def _spawn(self, key_id: str) -> KeyLimiter:
        return RedisKeyLimiter(self, key_id)

    async def admit(self, key_id: str, rpm: int) -> RateDecision:
        try:
            return await super().admit(key_id, rpm)
        except RedisUnavailable:
            self.unavailable += 1
            raise

    async def decide(self, key_id: str, rpm: int, wanted: int) -> list[RateDecision]:
        """One script for `wanted` admissions of `key_id`, bounded by ``timeout_s``; their
        decisions in order. Cancelled (or timed out) after the script was sent, the
        admissions may still have been counted."""
        interval, tolerance = gcra_params_us(rpm)
        args = (interval, tolerance, _KEEP_PAST_TAT_MS, wanted)
        self.scripts_run += 1
        with redis_call(self.timeout_s):
            reply = cast(list[int], await self.script([self.prefix + key_id], args))
        admitted, now, first = (int(x) for x in reply)
        decisions = []
        for i in range(wanted):
            decision, _ = gcra_us(first + min(i, admitted) * interval, now, rpm)
            if decision.allowed != (i < admitted):
                raise AssertionError(f"Lua and Python GCRA disagree on {reply!r} at rpm={rpm}")
            decisions.append(decision)
        return decisions

    def statistics(self) -> dict[str, object]:
        return {**super().statistics(), "scripts": self.scripts_run}


class RedisKeyLimiter(KeyLimiter):
    owner: RedisRateLimiter

    def __init__(self, owner: RedisRateLimiter, key_id: str) -> None:
        super().__init__(owner, key_id)
        settings = owner.key_settings
        self.inbox: Inbox[_Ask] = Inbox(
            settings.inbox_capacity, overflow=settings.overflow, name="rate_limiter"
        )
        self.batches = 0

    async def admit(self, rpm: int) -> RateDecision:
        reply: Reply[RateDecision] = Reply()
        await self.inbox.put(_Ask(rpm, reply))  # no checkpoint before it is queued
        # Bounded: an actor in backoff after a crash must not hold requests for long.
        with trio.move_on_after(self.owner.timeout_s * 4):
            return await reply.wait()
        raise RedisUnavailable("the key's rate limiter did not answer in time")

    def inbox_depth(self) -> int:
        return self.inbox.depth()

    def inbox_capacity(self) -> int:
        return self.inbox.capacity

    def handling(self) -> tuple[int, float | None]:
        return self.inbox.handling()

    def statistics(self) -> dict[str, object]:
        return {"batches": self.batches}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        idle_s = self.owner.key_settings.idle_retire_s
        while True:
            with trio.move_on_after(idle_s):
                first = await self.inbox.receive()
                batch = [first]
                while len(batch) < _MAX_BATCH:
                    try:
                        batch.append(self.inbox.receive_nowait())
                    except trio.WouldBlock:
                        break
                await self._decide(batch)
                continue
            if self.inbox.depth() == 0:  # idle: retire (no checkpoint until returned)
                self.owner.retire(self)
                return

    async def _decide(self, batch: list[_Ask]) -> None:
        began = trio.current_time()
        self.batches += 1
        try:
            start = 0
            while start < len(batch):  # consecutive asks with the same rpm: one script
                rpm = batch[start].rpm
                end = start + 1
                while end < len(batch) and batch[end].rpm == rpm:
                    end += 1
                try:
                    decisions = await self.owner.decide(self.key_id, rpm, end - start)
                except RedisUnavailable as exc:
                    for ask in batch[start:end]:
                        ask.reply.fail(exc)
                else:
                    for ask, decision in zip(batch[start:end], decisions, strict=True):
                        ask.reply.set(decision)
                start = end
        except BaseException as exc:
            # A crash (or cancellation) must not leave a caller waiting for ever; the caller
            # treats it as an undecided admission (fails open), as when Redis is away.
            failure = RedisUnavailable(f"the rate limiter of {self.key_id} crashed: {exc!r}")
            for ask in batch:
                if not ask.reply.done:
                    ask.reply.fail(failure)
            raise
        seconds = trio.current_time() - began
        for _ in batch:
            self.inbox.handled(seconds)


@asynccontextmanager
async def open_rate_limiter(
    redis_url: str | None,
    *,
    prefix: str = "gw:",
    timeout_s: float = 0.5,
    settings: ActorSettings = DEFAULTS["rate_limiter"],
) -> AsyncIterator[RateLimiter]:
    """A `RedisRateLimiter` on a client opened (and closed) for the block when ``redis_url`` is
    given, else a `LocalRateLimiter`. Opening does not contact Redis: an unreachable server
    shows up as `RedisUnavailable` from `admit`, not as a startup failure. The limiter is a
    supervisor: run it (under the root supervisor) before admitting."""
    if redis_url is None:
        yield LocalRateLimiter(settings)
        return
    async with coredis.Redis.from_url(redis_url) as client:
        yield RedisRateLimiter(client, prefix=prefix, timeout_s=timeout_s, settings=settings)
