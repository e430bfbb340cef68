"""Balances and key budgets shared by every instance, in Redis (used when `GATEWAY_REDIS_URL`
is set): the accountant's checks then hold across instances exactly.

Per organization, `bal:{org}` is its spendable balance: the stored balance when first needed,
minus every charge settled since (on any instance), plus credits added since. Per key and
period label, `spend:{key}:{label}` is what the key spent in that UTC day or month. Amounts
held for requests in flight are hashes, one field per instance (`held:{org}`, `kheld:{key}`),
and only instances that sent a heartbeat in the last `LIVE_S` seconds count: a crashed
instance's holds stop counting instead of blocking a budget forever.

A reservation is one Lua script: it checks the key's caps and the balance against everything
spent or held on every instance, and holds the amount, atomically. Settling is deferred to the
accountant's flush (one script per batch): until then the request's hold still counts,
which is never less than its charge, so a check can only be stricter than the truth, never
looser. Each value is read from the database once (the script asks for it when missing) and
expires after `STATE_TTL_S` so it is re-read now and then; a re-read misses charges settled
but not yet written by then (at most a flush interval's worth).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import coredis
import coredis.exceptions
import trio

from actors.errors import RedisUnavailable, redis_call
from protocol.billing import KeyBudget, Period, day_of, month_of
from protocol.ids import new_id
from protocol.timefmt import now_us

LIVE_S = 30
HEARTBEAT_S = 5.0
STATE_TTL_S = 3600
_MS = 1000

# KEYS: instances, bal, held, [spend_day, spend_month, kheld]
# ARGV: micros, now_s (unused: the script reads Redis's TIME), live_s, ttl_ms, bal_init,
#       cap_day, day_init, day_ttl_ms, cap_month, month_init, month_ttl_ms, instance
# An init argument of "" means "not read yet": the script answers MISSING and the caller
# retries with the stored value. A cap of -1 means no cap.
# Replies: {0, 0} held; {1, committed} day cap; {2, committed} month cap;
#          {3, available} balance; {4, 0} missing state.
_RESERVE_LUA = """
local micros = tonumber(ARGV[1])
local oldest = tonumber(redis.call('TIME')[1]) - tonumber(ARGV[3])  -- Redis's clock, as heartbeats
local function held(key)
  local fields = redis.call('HGETALL', key)
  local sum = 0
  for i = 1, #fields, 2 do
    local seen = redis.call('ZSCORE', KEYS[1], fields[i])
    if seen and tonumber(seen) >= oldest then sum = sum + tonumber(fields[i + 1]) end
  end
  return sum
end
local function value(key, init, ttl)
  local v = redis.call('GET', key)
  if v then return tonumber(v) end
  if init == '' then return nil end
  redis.call('SET', key, init, 'PX', ttl)
  return tonumber(init)
end
local bal = value(KEYS[2], ARGV[5], ARGV[4])
if bal == nil then return {4, 0} end
if #KEYS > 3 then
  local kheld = held(KEYS[6])
  local caps = {{KEYS[4], ARGV[6], ARGV[7], ARGV[8], 1}, {KEYS[5], ARGV[9], ARGV[10], ARGV[11], 2}}
  for _, c in ipairs(caps) do
    local cap = tonumber(c[2])
    if cap >= 0 then
      local spent = value(c[1], c[3], c[4])
      if spent == nil then return {4, 0} end
      local committed = spent + kheld
      if committed + micros > cap then return {c[5], committed} end
    end
  end
end
local available = bal - held(KEYS[3])
if available < micros then return {3, available} end
redis.call('HINCRBY', KEYS[3], ARGV[12], micros)
redis.call('PEXPIRE', KEYS[3], ARGV[4])
if #KEYS > 3 then
  redis.call('HINCRBY', KEYS[6], ARGV[12], micros)
  redis.call('PEXPIRE', KEYS[6], ARGV[4])
end
return {0, 0}
"""

# KEYS: the keys to change. ARGV: instance, then one (op, micros) pair per key: op "c"
# charges a balance (DECRBY), "s" adds spend (INCRBY, only if the counter exists: a missing one
# is re-read from the database, which has the charge by then), "h" releases this instance's hold.
_SETTLE_LUA = """
for i, key in ipairs(KEYS) do
  local op, micros = ARGV[2 * i], tonumber(ARGV[2 * i + 1])
  if op == 'c' then
    if redis.call('EXISTS', key) == 1 then redis.call('DECRBY', key, micros) end
  elseif op == 's' then
    if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, micros) end
  else
    redis.call('HINCRBY', key, ARGV[1], -micros)
  end
end
return #KEYS
"""

# KEYS: bal. ARGV: micros. Adds to a balance that is known (else the next read sees it).
_CREDIT_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCRBY', KEYS[1], ARGV[1]) end
return false
"""


@dataclass(frozen=True, slots=True)
class Refusal:
    kind: str  # "day", "month" or "balance"
    amount: int  # committed (caps) or available (balance), before this request


@dataclass(frozen=True, slots=True)
class Settlement:
    org_id: str
    key_id: str | None  # set when the key's budget held part of it
    held: int
    charged: int
    created_at: int


StoredReader = Callable[[], Awaitable[int]]


class SharedHolds:
    def __init__(
        self, client: coredis.Redis[Any], *, prefix: str = "gw:", timeout_s: float = 1.0
    ) -> None:
        self._client = client
        self._p = f"{prefix}bill:"
        self._timeout_s = timeout_s
        self.instance = new_id("inst")
        self._beat_at = -math.inf
        self._reserve = client.register_script(_RESERVE_LUA)
        self._credit = client.register_script(_CREDIT_LUA)
        self._settle = client.register_script(_SETTLE_LUA)

    def _keys(self, org_id: str, budget: KeyBudget | None, now: int) -> list[str]:
        p = self._p
        keys = [f"{p}instances", f"{p}bal:{org_id}", f"{p}held:{org_id}"]
        if budget is not None and budget.capped:
            keys += [
                f"{p}spend:{budget.key_id}:{day_of(now).label}",
                f"{p}spend:{budget.key_id}:{month_of(now).label}",
                f"{p}kheld:{budget.key_id}",
            ]
        return keys

    async def heartbeat(self) -> None:
        """Mark this instance live (its holds count); drop instances long gone."""
        p = self._p
        with redis_call(self._timeout_s):
            now_s = int((await self._client.time()).timestamp())
            await self._client.zadd(f"{p}instances", {self.instance: now_s})
            await self._client.zremrangebyscore(f"{p}instances", float("-inf"), now_s - 10 * LIVE_S)
        self._beat_at = trio.current_time()

    async def _ensure_live(self) -> None:
        """A hold only counts while this instance's heartbeat is fresh: renew a stale one
        before holding anything (fails with RedisUnavailable)."""
        if trio.current_time() - self._beat_at > LIVE_S / 2:
            await self.heartbeat()

    async def reserve(
        self,
        org_id: str,
        micros: int,
        budget: KeyBudget | None,
        *,
        stored_balance: StoredReader,
        stored_spend: Callable[[], Awaitable[tuple[int, int]]],
    ) -> Refusal | None:
        """Hold `micros` everywhere it counts, or say what refused it. The stored values are
        read (from the database) only when Redis lacks them."""
        await self._ensure_live()
        now = now_us()
        day, month = day_of(now), month_of(now)
        keys = self._keys(org_id, budget, now)
        init: tuple[str, str, str] = ("", "", "")
        for attempt in range(2):
            args = self._args(micros, budget, day, month, now, init)
            with redis_call(self._timeout_s):
                reply = cast(list[int], await self._reserve(keys, args))
            code, amount = int(reply[0]), int(reply[1])
            if code != 4:
                break
            if attempt == 1:
                raise RedisUnavailable("shared state vanished while being filled in")
            balance = await stored_balance()
            spent = await stored_spend() if len(keys) > 3 else (0, 0)
            init = (str(balance), str(spent[0]), str(spent[1]))
        if code == 0:
            return None
        return Refusal({1: "day", 2: "month", 3: "balance"}[code], amount)

    def _args(
        self,
        micros: int,
        budget: KeyBudget | None,
        day: Period,
        month: Period,
        now: int,
        init: tuple[str, str, str],
    ) -> list[str | int]:
        ttl_ms = STATE_TTL_S * _MS
        cap_day = -1 if budget is None or budget.daily_micros is None else budget.daily_micros
        cap_month = -1 if budget is None or budget.monthly_micros is None else budget.monthly_micros
        # A period's counter lives until a day after the period ends, at most the state TTL.
        day_ttl = min(ttl_ms, (day.end_us - now) // _MS + 86_400 * _MS)
        month_ttl = min(ttl_ms, (month.end_us - now) // _MS + 86_400 * _MS)
        return [
            micros,
            int(now // 1_000_000),
            LIVE_S,
            ttl_ms,
            init[0],
            cap_day,
            init[1],
            day_ttl,
            cap_month,
            init[2],
            month_ttl,
            self.instance,
        ]

    async def settle(self, settlements: Sequence[Settlement]) -> None:
        """Count the charges and release the holds of a batch, in one atomic script."""
        if not settlements:
            return
        p = self._p
        ops: dict[tuple[str, str], int] = defaultdict(int)
        for s in settlements:
            ops[("c", f"{p}bal:{s.org_id}")] += s.charged
            ops[("h", f"{p}held:{s.org_id}")] += s.held
            if s.key_id is not None:
                ops[("h", f"{p}kheld:{s.key_id}")] += s.held
                for period in (day_of(s.created_at), month_of(s.created_at)):
                    ops[("s", f"{p}spend:{s.key_id}:{period.label}")] += s.charged
        changes = [(op, key, micros) for (op, key), micros in ops.items() if micros]
        if not changes:
            return
        args: list[str | int] = [self.instance]
        for op, _, micros in changes:
            args += [op, micros]
        with redis_call(self._timeout_s):
            await self._settle([key for _, key, _ in changes], args)

    async def add_spend(self, key_id: str, micros: int, at: int) -> None:
        """Spend (negative: a refund) written to the database outside a reservation: added to
        the key's day and month counters of `at` where they are cached (a missing one is read
        from the database, which has it already)."""
        if not micros:
            return
        p = self._p
        keys = [f"{p}spend:{key_id}:{period.label}" for period in (day_of(at), month_of(at))]
        with redis_call(self._timeout_s):
            await self._settle(keys, [self.instance, "s", micros, "s", micros])

    async def credit(self, org_id: str, micros: int) -> None:
        """A top-up or adjustment was stored: add it to the shared balance if it is cached."""
        with redis_call(self._timeout_s):
            await self._credit([f"{self._p}bal:{org_id}"], [micros])


@asynccontextmanager
async def open_shared_holds(redis_url: str | None) -> AsyncIterator[SharedHolds | None]:
    """SharedHolds on a client opened for the block, or None without Redis. Opening does not
    contact Redis."""
    if redis_url is None:
        yield None
        return
    async with coredis.Redis.from_url(redis_url) as client:
        yield SharedHolds(client)
