"""The per-key rate limiter: one supervised actor owning every key's GCRA state.

The algorithm (and why GCRA) is in `protocol.ratelimit_headers`; this module only keeps the
state and the clock. Two backends share one interface, `RateLimiter`:

- `LocalRateLimiter`: a dict key -> TAT in this process, timed by Trio's clock. Exact within
  one process only.
- `RedisRateLimiter`: the TAT lives in Redis and each admission is one atomic Lua script timed
  by Redis's own clock, so all instances sharing the Redis share one limit, exactly.

Design note. The obvious actor design is one actor per key, reached by messages. Here one
actor owns all keys and admission is a direct ``await limiter.admit(key_id, rpm)``, not a
message:

- locally, admission is an O(1) computation with no await inside; a message round trip per
  request would add two task switches for no isolation gain on a single-threaded Trio loop;
- with Redis, Redis serializes the admissions of one key, so concurrent admissions for one hot
  key must not queue behind one another in our process (as they would in a per-key inbox).

The actor's `run` is housekeeping only: every minute it forgets keys whose TAT is in the past,
which is how idle keys "retire". Admission works whether or not `run` is running.

Errors: `RedisUnavailable` — the shared store could not give a decision in time (Redis
down, slow, or answering with an error). The caller decides to fail open or closed; `admit`
never hangs.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, ClassVar, cast

import coredis
import coredis.exceptions
import trio

from actors.base import Actor
from actors.errors import RedisUnavailable, redis_call
from protocol.ratelimit_headers import RateDecision, gcra_params_us, gcra_us

HOUSEKEEPING_INTERVAL_S = 60.0


class RateLimiter(Actor):
    """Owns the per-key limiter state. Admission is a method call, not a message: see above."""

    kind = "rate_limiter"

    name = "rate-limiter"
    backend: ClassVar[str]

    def __init__(self) -> None:
        self.admitted = 0
        self.refused = 0
        self.unavailable = 0

    @abc.abstractmethod
    async def admit(self, key_id: str, rpm: int) -> RateDecision:
        """Count one request for ``key_id`` against ``rpm`` (>= 1) and say whether it may go.

        A refused request is not counted against the key. Raises `RedisUnavailable` when
        the store cannot decide, `ValueError` for ``rpm < 1``.
        """

    @abc.abstractmethod
    def sweep(self) -> int:
        """Forget keys whose TAT is in the past (they are as good as new); return how many."""

    @abc.abstractmethod
    def tracked_keys(self) -> int:
        """Keys this instance currently holds state (or knowledge) for."""

    def statistics(self) -> dict[str, object]:
        return {
            "keys": self.tracked_keys(),
            "admitted": self.admitted,
            "refused": self.refused,
            "unavailable": self.unavailable,
            "backend": self.backend,
        }

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Ready at once; then sweep idle keys every minute until cancelled (no cleanup needed)."""
        task_status.started()
        while True:
            await trio.sleep(HOUSEKEEPING_INTERVAL_S)
            self.sweep()

    def _count(self, decision: RateDecision) -> RateDecision:
        if decision.allowed:
            self.admitted += 1
        else:
            self.refused += 1
        return decision


class LocalRateLimiter(RateLimiter):
    """Key -> TAT (integer microseconds of `trio.current_time`) in this process.

    `admit` never awaits: it is not a checkpoint and cannot be cancelled half-way.
    """

    backend = "local"

    def __init__(self) -> None:
        super().__init__()
        self._tat_us: dict[str, int] = {}

    async def admit(self, key_id: str, rpm: int) -> RateDecision:
        now = _now_us()
        decision, tat = gcra_us(self._tat_us.get(key_id, now), now, rpm)
        if decision.allowed:
            self._tat_us[key_id] = tat
        return self._count(decision)

    def sweep(self) -> int:
        now = _now_us()
        idle = [key for key, tat in self._tat_us.items() if tat <= now]
        for key in idle:
            del self._tat_us[key]
        return len(idle)

    def tracked_keys(self) -> int:
        return len(self._tat_us)


# KEYS[1]: the key's TAT, integer microseconds on the Redis clock. ARGV: the emission interval
# and the tolerance (microseconds, from `gcra_params_us`, so the rounding lives in one place),
# and how long to keep the key past its TAT (ms). Replies {allowed, now, max(TAT, now)} so the
# caller rebuilds the full decision with `gcra_us`. '%d', not tostring: Lua 5.1 prints numbers
# with 14 significant digits, which would round a 16-digit TAT.
_ADMIT_LUA = """
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
if tat - now > tolerance then return {0, now, tat} end
local new = tat + interval
local ttl = math.ceil((new - now) / 1000) + tonumber(ARGV[3])
redis.call('SET', KEYS[1], string.format('%d', new), 'PX', ttl)
return {1, now, tat}
"""
_KEEP_PAST_TAT_MS = 60_000
# What "the shared store could not decide" looks like from coredis and the network.


class RedisRateLimiter(RateLimiter):
    """TATs in Redis under ``f"{prefix}rl:{key_id}"``, one atomic script (EVALSHA) per admission.

    Time is Redis's ``TIME`` inside the script, so every instance shares one clock. Keys expire
    a minute after their TAT. The coredis client belongs to the caller, who opens and closes it.
    """

    backend = "redis"

    def __init__(
        self, client: coredis.Redis[Any], *, prefix: str = "gw:", timeout_s: float = 0.5
    ) -> None:
        super().__init__()
        self._prefix = f"{prefix}rl:"
        self._timeout_s = timeout_s
        self._script = client.register_script(_ADMIT_LUA)
        # Keys this instance has seen -> when (Trio clock) their TAT passes; statistics only.
        self._seen: dict[str, float] = {}

    async def admit(self, key_id: str, rpm: int) -> RateDecision:
        """One script round trip, bounded by ``timeout_s``.

        Raises `RedisUnavailable` on any Redis or network failure or timeout. Cancelled
        (or timed out) after the script was sent, the admission may still have been counted.
        """
        interval, tolerance = gcra_params_us(rpm)
        args = (interval, tolerance, _KEEP_PAST_TAT_MS)
        try:
            with redis_call(self._timeout_s):
                reply = cast(list[int], await self._script([self._prefix + key_id], args))
        except RedisUnavailable:
            self.unavailable += 1
            raise
        allowed, now, tat = (int(x) for x in reply)
        decision, _ = gcra_us(tat, now, rpm)
        if decision.allowed != bool(allowed):
            raise AssertionError(f"Lua and Python GCRA disagree on {reply!r} at rpm={rpm}")
        self._seen[key_id] = trio.current_time() + decision.reset_s
        return self._count(decision)

    def sweep(self) -> int:
        now = trio.current_time()
        idle = [key for key, until in self._seen.items() if until <= now]
        for key in idle:
            del self._seen[key]
        return len(idle)

    def tracked_keys(self) -> int:
        return len(self._seen)


@asynccontextmanager
async def open_rate_limiter(
    redis_url: str | None, *, prefix: str = "gw:", timeout_s: float = 0.5
) -> AsyncIterator[RateLimiter]:
    """A `RedisRateLimiter` on a client opened (and closed) for the block when ``redis_url`` is
    given, else a `LocalRateLimiter`. Opening does not contact Redis: an unreachable server
    shows up as `RedisUnavailable` from `admit`, not as a startup failure."""
    if redis_url is None:
        yield LocalRateLimiter()
        return
    async with coredis.Redis.from_url(redis_url) as client:
        yield RedisRateLimiter(client, prefix=prefix, timeout_s=timeout_s)


def _now_us() -> int:
    return round(trio.current_time() * 1_000_000)
