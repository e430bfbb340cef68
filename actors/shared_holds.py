"""Balances and key budgets shared by every instance, in Redis (used when `GATEWAY_REDIS_URL`
is set): the accountant's checks then hold across instances exactly.

Per organization, `bal:{org}` is its spendable balance: the stored balance when first needed,
minus every charge written since (on any instance), plus credits added since. Per key and
period label, `spend:{key}:{label}` is what the key spent in that UTC day or month. Amounts
held for requests in flight are hashes, one field per instance (`held:{org}`, `kheld:{key}`),
and only instances whose heartbeat is under `LIVE_S` seconds old count: a crashed instance's
holds stop counting instead of blocking a budget forever, and a reservation that meets such a
field deletes it (so a hash does not grow by a field per restart).

A reservation is one Lua script: it checks the key's caps and the balance against everything
spent or held on every instance, and holds the amount, atomically. Everything else an
instance sends (charges, releases of its holds, credits) goes through one ordered stream per
instance, applied after the database has the charges: until then the request's hold still
counts, which is never less than its charge, so a check can only be stricter than the truth.

Scripts that time out may still run later (a partition delivers them late), so every change
is idempotent:

- the stream's batches carry a sequence number; Redis keeps the highest applied (and a
  "fence") per instance, and a batch at or below it changes nothing. After a batch whose
  outcome is unknown, the instance fences it (it can no longer run) and learns whether it ran;
  what did not run is sent again in the next batch.
- a reservation carries the instance's epoch; after any failure the instance stops using
  Redis (its reservations fall back to its own view, docs/billing.md) until it has reconciled:
  one batch that applies what it owes (charges admitted meanwhile included), sets its hold
  fields to exactly what it holds, and moves to a new epoch, so a reservation sent before
  (late) changes nothing.

Each value is read from the database once (the reservation script asks for it when missing)
and expires after `STATE_TTL_S` unless used. Credits and spend taken back that could not be
applied at once are not re-applied after an outage (the value may have been re-read from the
database meanwhile, which has them): the value is deleted instead, to be read again.
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
PRUNE_S = 10 * LIVE_S  # an instance silent this long leaves the instances set
REGISTER_TTL_MS = 86_400_000  # an instance's stream and epoch register, renewed by heartbeats
_MS = 1000

# KEYS: instances, register, bal, held, [spend_day, spend_month, kheld]
# ARGV: micros, live_s, ttl_ms, bal_init, cap_day, day_init, day_ttl_ms, cap_month,
#       month_init, month_ttl_ms, instance, epoch
# An init argument of "" means "not read yet": the script answers MISSING and the caller
# retries with the stored value. A cap of -1 means no cap.
# Replies: {0, 0} held; {1, committed, held} day cap; {2, committed, held} month cap;
#          {3, available} balance; {4, 0} missing state; {5, 0} stale epoch (reconcile first).
_RESERVE_LUA = """
local micros = tonumber(ARGV[1])
local epoch = redis.call('HGET', KEYS[2], 'epoch')  -- none: Redis lost this instance's state
if not epoch or tonumber(epoch) ~= tonumber(ARGV[12]) then return {5, 0} end
local oldest = tonumber(redis.call('TIME')[1]) - tonumber(ARGV[2])  -- Redis's clock, as heartbeats
local function held(key)
  local fields = redis.call('HGETALL', key)
  local sum = 0
  for i = 1, #fields, 2 do
    local seen = redis.call('ZSCORE', KEYS[1], fields[i])
    if seen and tonumber(seen) >= oldest then
      sum = sum + tonumber(fields[i + 1])
    else
      redis.call('HDEL', key, fields[i])  -- a dead instance's: it reconciles if it comes back
    end
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
local bal = value(KEYS[3], ARGV[4], ARGV[3])
if bal == nil then return {4, 0} end
if #KEYS > 4 then
  local kheld = held(KEYS[7])
  local caps = {{KEYS[5], ARGV[5], ARGV[6], ARGV[7], 1}, {KEYS[6], ARGV[8], ARGV[9], ARGV[10], 2}}
  for _, c in ipairs(caps) do
    local cap = tonumber(c[2])
    if cap >= 0 then
      local spent = value(c[1], c[3], c[4])
      if spent == nil then return {4, 0} end
      local committed = spent + kheld
      if committed + micros > cap then return {c[5], committed, kheld} end
    end
  end
end
local available = bal - held(KEYS[4])
if available < micros then return {3, available} end
redis.call('HINCRBY', KEYS[4], ARGV[11], micros)
redis.call('PEXPIRE', KEYS[4], ARGV[3])
if #KEYS > 4 then
  redis.call('HINCRBY', KEYS[7], ARGV[11], micros)
  redis.call('PEXPIRE', KEYS[7], ARGV[3])
end
return {0, 0}
"""

# One batch of the instance's stream. KEYS: register, then the keys to change.
# ARGV: instance, seq, epoch ("" keeps it), ttl_ms, then one (op, micros) pair per key:
#   c  charge a balance (DECRBY)      C  credit a balance (INCRBY)
#   s  add spend (INCRBY)             S  take spend back (DECRBY)
#        (c, C, s, S only where the value exists: a missing one is read from the database,
#         which has the change already)
#   h  release part of this instance's hold (never below zero: a field deleted meanwhile stays so)
#   H  set this instance's hold to exactly `micros`      r  delete the value (read it again)
# Replies 1 when applied, 0 when the batch was applied or fenced already (nothing changes).
_BATCH_LUA = """
local seq = tonumber(ARGV[2])
local applied = tonumber(redis.call('HGET', KEYS[1], 'applied') or '0')
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if seq <= math.max(applied, fence) then return 0 end
local me = ARGV[1]
for i = 2, #KEYS do
  local key, op, micros = KEYS[i], ARGV[2 * i + 1], tonumber(ARGV[2 * i + 2])
  if op == 'c' or op == 'S' then
    if redis.call('EXISTS', key) == 1 then redis.call('DECRBY', key, micros) end
  elseif op == 'C' or op == 's' then
    if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, micros) end
  elseif op == 'h' then
    if redis.call('HINCRBY', key, me, -micros) <= 0 then redis.call('HDEL', key, me) end
  elseif op == 'H' then
    if micros > 0 then
      redis.call('HSET', key, me, micros)
      redis.call('PEXPIRE', key, ARGV[4])
    else
      redis.call('HDEL', key, me)
    end
  else
    redis.call('DEL', key)
  end
end
redis.call('HSET', KEYS[1], 'applied', seq)
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'epoch', ARGV[3]) end
redis.call('PEXPIRE', KEYS[1], $REGISTER_TTL_MS)
return 1
""".replace("$REGISTER_TTL_MS", str(REGISTER_TTL_MS))

# KEYS: register. ARGV: seq. No batch at or below `seq` runs after this; replies the highest
# applied (unchanged by fences, so a repeated fence gives the same answer).
_FENCE_LUA = """
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) > fence then redis.call('HSET', KEYS[1], 'fence', ARGV[1]) end
redis.call('PEXPIRE', KEYS[1], $REGISTER_TTL_MS)
return tonumber(redis.call('HGET', KEYS[1], 'applied') or '0')
""".replace("$REGISTER_TTL_MS", str(REGISTER_TTL_MS))

# KEYS: instances, register. ARGV: instance, live_s, prune_s. Beats with Redis's clock (a late
# heartbeat cannot move it back) and makes sure the register exists (reservations need it);
# replies 1 when the previous beat was missing or too old (this instance's holds stopped
# counting and may have been deleted, or Redis lost its data).
_HEARTBEAT_LUA = """
local now = tonumber(redis.call('TIME')[1])
local prev = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], 'GT', now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
redis.call('HSETNX', KEYS[2], 'epoch', 0)
redis.call('PEXPIRE', KEYS[2], $REGISTER_TTL_MS)
if prev and tonumber(prev) >= now - tonumber(ARGV[2]) then return 0 end
return 1
""".replace("$REGISTER_TTL_MS", str(REGISTER_TTL_MS))

_LOOSER = {"C": "r", "S": "r"}  # after an outage: delete (re-read) instead of re-applying
Op = tuple[str, str]  # (op, key)


@dataclass(frozen=True, slots=True)
class Refusal:
    kind: str  # "day", "month" or "balance"
    amount: int  # committed (caps) or available (balance), before this request
    held: int | None = None  # caps: the part of `amount` held for requests in flight


@dataclass(frozen=True, slots=True)
class Settlement:
    org_id: str
    key_id: str | None  # set when the key's budget held part of it (or counts the charge)
    held: int
    charged: int
    created_at: int
    here: int | None = None  # held on the instance's own view: `SharedHolds.hold_here`'s answer


StoredReader = Callable[[], Awaitable[int]]


class SharedHolds:
    def __init__(
        self, client: coredis.Redis[Any], *, prefix: str = "gw:", timeout_s: float = 1.0
    ) -> None:
        self.client = client  # the instance's Redis (cooldowns are shared on it too)
        self._p = f"{prefix}bill:"
        self._timeout_s = timeout_s
        self.instance = new_id("inst")
        self._register = f"{self._p}inst:{self.instance}"
        self._beat_at = -math.inf
        self._reserve = client.register_script(_RESERVE_LUA)
        self._batch = client.register_script(_BATCH_LUA)
        self._fence = client.register_script(_FENCE_LUA)
        self._beat = client.register_script(_HEARTBEAT_LUA)
        # The stream: what is owed (not sent), the last batch sent, one whose outcome is unknown.
        self._owed: dict[Op, int] = defaultdict(int)
        self._seq = 0
        self._unknown: tuple[int, dict[Op, int]] | None = None
        self._sending = trio.Lock()
        # This instance's holds as Redis should have them once the owed releases are applied
        # (per hash key), for reconciling; and the epoch its reservations carry.
        self._holds: dict[str, int] = defaultdict(int)
        self._epoch = 0
        self._snapshots = 0  # of `_holds`, taken by reconciliations
        self._posted = 0  # the last snapshot Redis has
        self.trusted = True  # False after a failure, until reconciled
        self._reserving = 0
        self._idle = trio.Event()
        self._idle.set()

    def _keys(self, org_id: str, budget: KeyBudget | None, now: int) -> list[str]:
        p = self._p
        keys = [f"{p}instances", self._register, f"{p}bal:{org_id}", f"{p}held:{org_id}"]
        if budget is not None and budget.capped:
            keys += [
                f"{p}spend:{budget.key_id}:{day_of(now).label}",
                f"{p}spend:{budget.key_id}:{month_of(now).label}",
                f"{p}kheld:{budget.key_id}",
            ]
        return keys

    async def heartbeat(self) -> None:
        """Mark this instance live (its holds count); drop instances long gone. A beat that
        finds the previous one lapsed means this instance's holds may be gone: reconcile."""
        first = self._beat_at == -math.inf
        with redis_call(self._timeout_s):
            lapsed: int = await self._beat(
                [f"{self._p}instances", self._register], [self.instance, LIVE_S, PRUNE_S]
            )
        self._beat_at = trio.current_time()
        if lapsed and not first:
            self.trusted = False

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
        read (from the database) only when Redis lacks them. RedisUnavailable at once while
        this instance has not reconciled after a failure."""
        if not self.trusted:
            raise RedisUnavailable("reconciling with Redis after a failure")
        self._reserving += 1
        self._idle = trio.Event() if self._reserving == 1 else self._idle
        try:
            return await self._try_reserve(org_id, micros, budget, stored_balance, stored_spend)
        except RedisUnavailable:
            # It may still run late: reconcile (setting these holds exactly) before trusting
            # Redis again.
            self.trusted = False
            keys = self._keys(org_id, budget, now_us())
            for key in (keys[3], *keys[6:]):  # held:{org}, and kheld:{key} for a capped key
                self._holds[key] += 0
            raise
        finally:
            self._reserving -= 1
            if not self._reserving:
                self._idle.set()

    async def _try_reserve(
        self,
        org_id: str,
        micros: int,
        budget: KeyBudget | None,
        stored_balance: StoredReader,
        stored_spend: Callable[[], Awaitable[tuple[int, int]]],
    ) -> Refusal | None:
        await self._ensure_live()
        now = now_us()
        day, month = day_of(now), month_of(now)
        keys = self._keys(org_id, budget, now)
        init: tuple[str, str, str] = ("", "", "")
        epoch = self._epoch
        for attempt in range(2):
            if not self.trusted:  # a failure elsewhere while this one waited
                raise RedisUnavailable("reconciling with Redis after a failure")
            args = self._args(micros, budget, day, month, now, init, epoch)
            with redis_call(self._timeout_s):
                reply = cast(list[int], await self._reserve(keys, args))
            code, amount = int(reply[0]), int(reply[1])
            if code == 5:
                raise RedisUnavailable("Redis lost this instance's state (or it moved on)")
            if code != 4:
                break
            if attempt == 1:
                raise RedisUnavailable("shared state vanished while being filled in")
            balance = await stored_balance()
            spent = await stored_spend() if len(keys) > 4 else (0, 0)
            init = (str(balance), str(spent[0]), str(spent[1]))
        if code == 0:
            self._holds[keys[3]] += micros
            if len(keys) > 4:
                self._holds[keys[6]] += micros
            return None
        held = int(reply[2]) if len(reply) > 2 else None
        return Refusal({1: "day", 2: "month", 3: "balance"}[code], amount, held)

    def _args(
        self,
        micros: int,
        budget: KeyBudget | None,
        day: Period,
        month: Period,
        now: int,
        init: tuple[str, str, str],
        epoch: int,
    ) -> list[str | int]:
        ttl_ms = STATE_TTL_S * _MS
        cap_day = -1 if budget is None or budget.daily_micros is None else budget.daily_micros
        cap_month = -1 if budget is None or budget.monthly_micros is None else budget.monthly_micros
        # A period's counter lives until a day after the period ends, at most the state TTL.
        day_ttl = min(ttl_ms, (day.end_us - now) // _MS + 86_400 * _MS)
        month_ttl = min(ttl_ms, (month.end_us - now) // _MS + 86_400 * _MS)
        return [
            micros,
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
            epoch,
        ]

    async def settle(self, settlements: Sequence[Settlement]) -> None:
        """Count the charges (already written to the database) and release the holds of a
        batch. Also the moment this instance reconciles after a failure (with or without a
        batch). On RedisUnavailable nothing is lost: it is sent with the next batch."""
        p = self._p
        for s in settlements:
            self._owe("c", f"{p}bal:{s.org_id}", s.charged)
            # A hold taken on the instance's own view is in Redis only if a reconciliation
            # posted it (a snapshot taken after it); otherwise it is only forgotten here.
            posted = s.here is None or s.here < self._posted
            self._release(f"{p}held:{s.org_id}", s.held, posted)
            if s.key_id is not None:
                self._release(f"{p}kheld:{s.key_id}", s.held, posted)
                for period in (day_of(s.created_at), month_of(s.created_at)):
                    self._owe("s", f"{p}spend:{s.key_id}:{period.label}", s.charged)
        await self.sync()

    async def add_spend(self, key_id: str, micros: int, at: int) -> None:
        """Spend (negative: a refund) written to the database outside a reservation: added to
        the key's day and month counters of `at` where they are cached (a missing one is read
        from the database, which has it already)."""
        for period in (day_of(at), month_of(at)):
            key = f"{self._p}spend:{key_id}:{period.label}"
            self._owe("s", key, micros) if micros >= 0 else self._owe("S", key, -micros)
        await self.sync()

    async def credit(self, org_id: str, micros: int) -> None:
        """A top-up or adjustment (negative: taken away) was stored: add it to the shared
        balance if it is cached."""
        key = f"{self._p}bal:{org_id}"
        self._owe("C", key, micros) if micros >= 0 else self._owe("c", key, -micros)
        await self.sync()

    def _owe(self, op: str, key: str, micros: int) -> None:
        if micros:
            self._owed[(op, key)] += micros

    def _release(self, key: str, micros: int, posted: bool) -> None:
        if micros:
            self._holds[key] -= micros
            if posted:
                self._owed[("h", key)] += micros

    def hold_here(self, org_id: str, key_id: str | None, micros: int) -> int:
        """A reservation admitted on this instance's own view while Redis was unavailable: it
        counts in the holds the next reconciliation posts (so a request still in flight then
        is held in Redis too). Returns what its Settlement carries as `here`."""
        self._holds[f"{self._p}held:{org_id}"] += micros
        if key_id is not None:
            self._holds[f"{self._p}kheld:{key_id}"] += micros
        return self._snapshots

    async def sync(self) -> None:
        """Send what is owed; after a failure, reconcile first. RedisUnavailable if Redis
        cannot answer (everything stays owed)."""
        async with self._sending:
            if not self.trusted or self._unknown is not None:
                await self._reconcile()
            elif self._owed:
                await self._send(self._take_owed(), epoch=None)

    def _take_owed(self) -> dict[Op, int]:
        owed, self._owed = self._owed, defaultdict(int)
        return dict(owed)

    async def _send(self, ops: dict[Op, int], *, epoch: int | None) -> None:
        self._seq += 1
        seq = self._seq
        changes = [(op, key, micros) for (op, key), micros in ops.items()]
        changes.sort(key=lambda c: c[0] == "r")  # deletions last: they win over deltas
        args: list[str | int] = [
            self.instance,
            seq,
            "" if epoch is None else epoch,
            STATE_TTL_S * _MS,
        ]
        for op, _, micros in changes:
            args += [op, micros]
        try:
            with redis_call(self._timeout_s):
                await self._batch([self._register] + [key for _, key, _ in changes], args)
        except RedisUnavailable:
            self._unknown = (seq, ops)  # may have run, or may run late: fenced before a resend
            self.trusted = False
            raise
        for op, key in ops:  # a hold released to zero is gone from Redis: forget it here too
            if op in ("h", "H") and not self._holds.get(key, 1):
                del self._holds[key]

    async def _reconcile(self) -> None:
        """Make Redis agree with this instance before trusting it again: no reservation in
        flight (they fail fast meanwhile), a fresh heartbeat, the batch of unknown outcome
        fenced (and owed again unless it ran), then one batch with everything owed, this
        instance's holds as they are, and a new epoch (a reservation sent before can no
        longer hold anything)."""
        self.trusted = False
        with trio.move_on_after(self._timeout_s):  # reservations are bounded by it too
            await self._idle.wait()
        if self._reserving:
            raise RedisUnavailable("reservations still waiting for Redis")
        await self.heartbeat()  # the holds about to be posted must count
        if self._unknown is not None:
            seq, ops = self._unknown
            with redis_call(self._timeout_s):
                applied = int(await self._fence([self._register], [seq]))
            self._unknown = None
            if applied < seq:  # never ran, and now never will
                for (op, key), micros in ops.items():
                    if op not in ("h", "H"):  # holds are set exactly below
                        self._owed[(op, key)] += micros
        batch: dict[Op, int] = defaultdict(int)
        for (op, key), micros in self._take_owed().items():
            if op != "h":
                batch[(_LOOSER.get(op, op), key)] += micros
        for key, micros in self._holds.items():
            batch[("H", key)] = micros
        self._snapshots += 1
        snapshot = self._snapshots
        self._epoch += 1
        await self._send(dict(batch), epoch=self._epoch)
        self._posted = snapshot
        self.trusted = True


@asynccontextmanager
async def open_shared_holds(redis_url: str | None) -> AsyncIterator[SharedHolds | None]:
    """SharedHolds on a client opened for the block, or None without Redis. Opening does not
    contact Redis."""
    if redis_url is None:
        yield None
        return
    async with coredis.Redis.from_url(redis_url) as client:
        yield SharedHolds(client)
