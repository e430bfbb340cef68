"""The response cache's store in Redis (`[cache] store = "redis"`): the same interface as the
database store (storage/response_cache.py `CacheStore`), on the instance's Redis client.

Layout (prefix `gw:cache:`; `<k>` is the entry key in hex, `<m>` the member `<k>:<org>`):

    E:<org>:<k>      hash: the entry (sealed body/query/vector, kind, tokens, model, key_id,
                     scope, created, expires µs, hits); PEXPIREAT at its expiry
    lru              sorted set <m> by last use (µs): eviction, least recently used first
    exp              sorted set <m> by expiry (µs): maintenance drops what expired
    sizes, bytes     hash <m> -> stored bytes, and their sum (the `max_bytes` bound)
    O:<org>          sorted set <k> by creation: everything of the org, and purge by age
    M:<org>:<model>  set <k>: purge by model
    K:<org>:<key_id> set <k>: purge by key
    S:<org>:<scope>  sorted set <k> by creation, the newest SCOPE_MAX only: semantic candidates

Each operation is one Lua script, so an entry and its indexes change together. Expiry is
checked against the caller's clock (the `expires` field), not only Redis's TTL, so both clocks
agree in tests. The org's index sets expire with their newest entry; a member whose entry is
gone (expired, replaced under another model) is skipped by the reads and removed by the next
purge or maintenance that meets it. A purge checks every entry's own fields, so an index only
narrows the search.

A purge runs as one script (Redis is busy for its duration: an org of 100,000 entries takes
some 100 ms) and its `cache.purged` event is written to the database afterwards: not in one
transaction with the deletion, as the database store does (the event may be missing if the
database fails after Redis deleted; the API then answers 503 and a retry purges 0 and writes
it). Failures raise StorageUnavailable, like the database store's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import coredis
import coredis.exceptions
import trio
from coredis.tokens import PureToken

from storage import events
from storage.database import Database
from storage.errors import StorageUnavailable
from storage.response_cache import PURGED, Candidate, EventData, Maintenance, StoredEntry

SCOPE_MAX = 1024  # newest entries kept per semantic scope
_BATCH = 500
_FAILURES = (coredis.exceptions.RedisError, OSError, TimeoutError)

_GET = """
local v = redis.call('HMGET', KEYS[1], 'expires', 'kind', 'body', 'pt', 'ct', 'created',
                     'model', 'key_id', 'scope', 'query', 'vector')
if not v[1] or tonumber(v[1]) <= tonumber(ARGV[1]) then return nil end
for i = 1, #v do if not v[i] then v[i] = '' end end
return v
"""

# ARGV prefix, now, then (org, key hex, hits) triples: entries used since the last touch.
_TOUCH = """
local p, now = ARGV[1], ARGV[2]
for i = 3, #ARGV, 3 do
  local org, kh = ARGV[i], ARGV[i + 1]
  local e = p .. 'E:' .. org .. ':' .. kh
  if redis.call('EXISTS', e) == 1 then
    redis.call('HINCRBY', e, 'hits', ARGV[i + 2])
    redis.call('ZADD', p .. 'lru', 'XX', now, kh .. ':' .. org)
  end
end
return 1
"""

_PUT = """
local function extend(k)
  if redis.call('PTTL', k) < 0 then redis.call('PEXPIREAT', k, ARGV[10])
  else redis.call('PEXPIREAT', k, ARGV[10], 'GT') end
end
local old = redis.call('HGET', KEYS[3], ARGV[1])
if old then redis.call('DECRBY', KEYS[4], old) end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 11))
redis.call('PEXPIREAT', KEYS[1], ARGV[10])
redis.call('ZADD', KEYS[2], ARGV[6], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
redis.call('INCRBY', KEYS[4], ARGV[5])
redis.call('ZADD', KEYS[5], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[6], ARGV[4], ARGV[2]); extend(KEYS[6])
redis.call('SADD', KEYS[7], ARGV[2]); extend(KEYS[7])
if ARGV[7] == '1' then redis.call('SADD', KEYS[8], ARGV[2]); extend(KEYS[8]) end
if ARGV[8] == '1' then
  redis.call('ZADD', KEYS[9], ARGV[4], ARGV[2])
  redis.call('ZREMRANGEBYRANK', KEYS[9], 0, -(tonumber(ARGV[9]) + 1))
  extend(KEYS[9])
end
return 1
"""

# Drop entries with their indexes: ARGV prefix, now, then (org, key hex) pairs. Returns the
# number that were unexpired and the bytes freed.
_DROP_BODY = """
local function drop(p, now, org, kh)
  local member = kh .. ':' .. org
  local e = p .. 'E:' .. org .. ':' .. kh
  local f = redis.call('HMGET', e, 'model', 'key_id', 'scope', 'expires')
  local live, freed = 0, 0
  if f[4] then
    if tonumber(f[4]) > now then live = 1 end
    redis.call('DEL', e)
    redis.call('SREM', p .. 'M:' .. org .. ':' .. f[1], kh)
    if f[2] and f[2] ~= '' then redis.call('SREM', p .. 'K:' .. org .. ':' .. f[2], kh) end
    if f[3] and f[3] ~= '' then redis.call('ZREM', p .. 'S:' .. org .. ':' .. f[3], kh) end
  end
  local size = redis.call('HGET', p .. 'sizes', member)
  if size then
    redis.call('DECRBY', p .. 'bytes', size)
    redis.call('HDEL', p .. 'sizes', member)
    freed = tonumber(size)
  end
  redis.call('ZREM', p .. 'lru', member)
  redis.call('ZREM', p .. 'exp', member)
  redis.call('ZREM', p .. 'O:' .. org, kh)
  return live, freed
end
"""

_DROP = (
    _DROP_BODY
    + """
local p, now, live, freed = ARGV[1], tonumber(ARGV[2]), 0, 0
for i = 3, #ARGV, 2 do
  local l, f = drop(p, now, ARGV[i], ARGV[i + 1])
  live = live + l; freed = freed + f
end
return {live, freed}
"""
)

# Purge: ARGV prefix, now, org, model or '', key_id or '', created_before or ''. The smallest
# index names the candidates; each entry's own fields decide.
_PURGE = (
    _DROP_BODY
    + """
local p, now, org = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local model, key_id, before = ARGV[4], ARGV[5], ARGV[6]
local members, stale_set
if model ~= '' then
  stale_set = p .. 'M:' .. org .. ':' .. model
  members = redis.call('SMEMBERS', stale_set)
elseif key_id ~= '' then
  stale_set = p .. 'K:' .. org .. ':' .. key_id
  members = redis.call('SMEMBERS', stale_set)
elseif before ~= '' then
  members = redis.call('ZRANGE', p .. 'O:' .. org, '-inf', '(' .. before, 'BYSCORE')
else
  members = redis.call('ZRANGE', p .. 'O:' .. org, 0, -1)
end
local live = 0
for _, kh in ipairs(members) do
  local f = redis.call('HMGET', p .. 'E:' .. org .. ':' .. kh, 'model', 'key_id', 'created')
  if not f[3] then
    local l = drop(p, now, org, kh)
    if stale_set then redis.call('SREM', stale_set, kh) end
  elseif (model == '' or f[1] == model) and (key_id == '' or f[2] == key_id)
      and (before == '' or tonumber(f[3]) < tonumber(before)) then
    live = live + drop(p, now, org, kh)
  end
end
return live
"""
)

_CANDIDATES = """
local out = {}
local keys = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1, 'REV')
for _, kh in ipairs(keys) do
  local f = redis.call('HMGET', ARGV[1] .. kh, 'expires', 'scope', 'vector', 'query')
  if f[1] and tonumber(f[1]) > tonumber(ARGV[2]) and f[2] == ARGV[4] and f[3] and f[3] ~= ''
      and f[4] and f[4] ~= '' then
    out[#out + 1] = kh; out[#out + 1] = f[3]; out[#out + 1] = f[4]
  end
end
return out
"""


@contextmanager
def _mapped(timeout_s: float) -> Iterator[None]:
    try:
        with trio.fail_after(timeout_s):
            yield
    except trio.TooSlowError as exc:
        raise StorageUnavailable(f"Redis did not answer within {timeout_s} s") from exc
    except _FAILURES as exc:
        raise StorageUnavailable(f"Redis failed: {type(exc).__name__}") from exc


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


class RedisCacheStore:
    def __init__(
        self,
        client: coredis.Redis[Any],
        db: Database,
        *,
        prefix: str = "gw:cache:",
        timeout_s: float = 1.0,
    ) -> None:
        """`db`: where purge events are written (the events outbox is in the database)."""
        self._client = client
        self._db = db
        self._p = prefix
        self._timeout_s = timeout_s
        self._get = client.register_script(_GET)
        self._put = client.register_script(_PUT)
        self._touch = client.register_script(_TOUCH)
        self._drop = client.register_script(_DROP)
        self._purge = client.register_script(_PURGE)
        self._candidates = client.register_script(_CANDIDATES)

    def _entry_key(self, org_id: str, key: bytes) -> str:
        return f"{self._p}E:{org_id}:{key.hex()}"

    async def get(self, org_id: str, key: bytes, *, now: int) -> StoredEntry | None:
        with _mapped(self._timeout_s):
            v: list[Any] | None = await self._get([self._entry_key(org_id, key)], [now])
        if not v:
            return None
        expires, kind, body, pt, ct, created, model, key_id, scope, query, vector = v
        return StoredEntry(
            org_id=org_id,
            key=key,
            model=_text(model),
            key_id=_text(key_id) or None,
            kind=_text(kind),
            body=_bytes(body),
            prompt_tokens=int(pt),
            completion_tokens=int(ct),
            created_at=int(created),
            expires_at=int(expires),
            scope=bytes.fromhex(_text(scope)) if scope else None,
            query=_bytes(query) or None,
            vector=_bytes(vector) or None,
        )

    async def touch(self, used: Sequence[tuple[str, bytes, int]], *, now: int) -> None:
        """Count the hits and refresh the last use of entries used since the last touch."""
        for start in range(0, len(used), _BATCH):
            args: list[str | int] = [self._p, now]
            for org_id, key, hits in used[start : start + _BATCH]:
                args += [org_id, key.hex(), hits]
            with _mapped(self._timeout_s):
                await self._touch([], args)

    async def put(self, entry: StoredEntry, *, now: int) -> None:
        org, kh = entry.org_id, entry.key.hex()
        p = self._p
        scope = entry.scope.hex() if entry.scope is not None else ""
        fields: list[str | bytes | int] = [
            "kind", entry.kind, "body", entry.body, "pt", entry.prompt_tokens,
            "ct", entry.completion_tokens, "created", entry.created_at,
            "expires", entry.expires_at, "model", entry.model, "key_id", entry.key_id or "",
            "scope", scope, "query", entry.query or b"", "vector", entry.vector or b"",
            "hits", 0,
        ]  # fmt: skip
        keys = [
            self._entry_key(org, entry.key),
            f"{p}lru",
            f"{p}sizes",
            f"{p}bytes",
            f"{p}exp",
            f"{p}O:{org}",
            f"{p}M:{org}:{entry.model}",
            f"{p}K:{org}:{entry.key_id or ''}",
            f"{p}S:{org}:{scope}",
        ]
        args: list[str | bytes | int] = [
            f"{kh}:{org}",
            kh,
            entry.expires_at,
            entry.created_at,
            entry.size,
            now,
            "1" if entry.key_id else "0",
            "1" if scope else "0",
            SCOPE_MAX,
            entry.expires_at // 1000 + 1,
            *fields,
        ]
        with _mapped(self._timeout_s):
            await self._put(keys, args)

    async def candidates(
        self, org_id: str, scope: bytes, *, now: int, limit: int
    ) -> list[Candidate]:
        if limit <= 0:
            return []
        with _mapped(self._timeout_s):
            flat: list[Any] = await self._candidates(
                [f"{self._p}S:{org_id}:{scope.hex()}"],
                [f"{self._p}E:{org_id}:", now, limit, scope.hex()],
            )
        return [
            Candidate(bytes.fromhex(_text(flat[i])), _bytes(flat[i + 1]), _bytes(flat[i + 2]))
            for i in range(0, len(flat), 3)
        ]

    async def purge(
        self,
        org_id: str,
        *,
        model: str | None,
        key_id: str | None,
        created_before: int | None,
        now: int,
        event_data: EventData,
    ) -> int:
        args: list[str | int] = [self._p, now, org_id, model or "", key_id or ""]
        args.append("" if created_before is None else str(created_before))
        with _mapped(self._timeout_s * 10):
            purged = int(await self._purge([], args))
        async with self._db.transaction() as tx:
            await events.append(tx, org_id, PURGED, event_data(purged))
        return purged

    async def totals(self) -> tuple[int, int]:
        with _mapped(self._timeout_s):
            entries = await self._client.zcard(f"{self._p}lru")
            size = await self._client.get(f"{self._p}bytes")
        return int(entries), int(size or 0)

    async def _drop_members(self, members: tuple[Any, ...], now: int) -> tuple[int, int]:
        args: list[str | int] = [self._p, now]
        for m in members:
            kh, _, org = _text(m).partition(":")
            args += [org, kh]
        with _mapped(self._timeout_s):
            answer: list[Any] = await self._drop([], args)
        return int(answer[0]), int(answer[1])

    async def maintain(self, *, now: int, max_entries: int, max_bytes: int) -> Maintenance:
        expired = 0
        while True:
            with _mapped(self._timeout_s):
                members = await self._client.zrange(
                    f"{self._p}exp", "-inf", now, sortby=PureToken.BYSCORE, offset=0, count=_BATCH
                )
            if members:
                await self._drop_members(tuple(members), now)
                expired += len(members)
            if len(members) < _BATCH:
                break
        entries, size = await self.totals()
        evicted = 0
        while entries > max_entries or size > max_bytes:
            average = max(1, size // max(1, entries))
            over_bytes = -(-(size - max_bytes) // average) if size > max_bytes else 0
            n = min(_BATCH, max(1, entries - max_entries, over_bytes))
            with _mapped(self._timeout_s):
                members = await self._client.zrange(f"{self._p}lru", 0, n - 1)
            if not members:
                break
            _, freed = await self._drop_members(tuple(members), now)
            evicted += len(members)
            entries -= len(members)
            size -= freed
        return Maintenance(expired, evicted, entries, size)
