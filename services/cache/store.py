"""`ResponseCache`: what the request path calls to look answers up, store them, and what the
purge API calls (docs/cache.md, "Store" and "Purge").

Entries are sealed here (services/cache/sealing.py) before they reach a store
(storage/response_cache.py for `store = "database"`, storage/response_cache_redis.py for
`"redis"`), so no prompt or answer is in clear in the database or in Redis.

Failure policy: `get`, `put` and `candidates` never raise (cancellation aside): the cache is an
optimisation and never fails a request. A store that cannot be reached (StorageError), or fails
otherwise (a PostgreSQL deadlock between two instances' evictions, a bug), is a miss (`get`
None, `candidates` []) or a put not done, counted in `failures`; an entry that does not open
(another org's row copied here, a rotated master key, a damaged value) is a miss counted in
`unopenable`. Both are logged at most every 10 s, without content: a StorageError by its type,
anything else with its traceback. `purge` is an API call: its failures propagate (the request
layer answers StorageUnavailable as 503).

Lookups are reads (on the database's read pool, not its writer): the hits they count and the
last use that orders eviction are written in batches (`flush`) by the first lookup or store a
second after the batch began, and before every maintenance pass (so eviction sees them all).

Bounds: an answer over `max_entry_bytes` is not stored (`oversize`). `max_entries` and
`max_bytes` are kept amortised: after a put, the store's totals are estimated (last measured,
plus what this instance put since); only when the estimate passes a bound, or every
`measure_every` puts, does one pass (`maintain`) delete expired entries, measure, and evict the
least recently used down to `low_water` of each bound, making room for many puts at once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from services.cache.sealing import CacheSealer, CacheUnopenable
from storage.errors import StorageError
from storage.response_cache import CacheStore, StoredEntry

log = logging.getLogger("gateway.cache")

Kind = Literal["json", "sse"]
_KINDS = ("json", "sse")
_LOG_EVERY_US = 10_000_000


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    kind: Kind
    body: bytes  # the JSON answer, or the SSE frames exactly as the client got them
    prompt_tokens: int
    completion_tokens: int
    created_at_us: int

    def __repr__(self) -> str:
        return f"CachedAnswer(kind={self.kind!r}, body=<{len(self.body)} bytes>)"


@dataclass
class CacheCounters:
    """Since this instance started (gateway_cache_operations)."""

    hits: int = 0
    misses: int = 0
    stores: int = 0
    oversize: int = 0  # answers over max_entry_bytes, not stored
    evictions: int = 0  # least recently used, past a bound
    expired: int = 0  # removed by maintenance after their TTL
    purged: int = 0
    failures: int = 0  # a store that failed: a miss, or a put not done
    unopenable: int = 0  # an entry that did not open here: a miss
    maintenance: int = 0  # passes run

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class _Totals:
    entries: int = 0
    bytes: int = 0
    measured: bool = False
    since: int = 0  # puts since the last measure
    running: bool = False


@dataclass
class ResponseCache:
    store: CacheStore
    sealer: CacheSealer
    clock: Callable[[], int]  # wall-clock µs (tests drive it with Trio's MockClock)
    max_entries: int
    max_bytes: int
    max_entry_bytes: int
    low_water: float = 0.9  # a maintenance pass evicts down to this share of each bound
    measure_every: int = 256  # puts between measures even under the bounds (other instances)
    touch_every_us: int = 1_000_000  # hits are written at most this long after they happen…
    touch_batch: int = 256  # … or once this many entries were used
    counters: CacheCounters = field(default_factory=CacheCounters)
    _totals: _Totals = field(default_factory=_Totals)
    _logged_at: int = -(10**18)
    _used: dict[tuple[str, bytes], int] = field(default_factory=dict)  # hits not yet written
    _touched_at: int | None = None

    @property
    def entries(self) -> int:
        """The store's entries at the last measure plus this instance's puts since."""
        return self._totals.entries

    @property
    def stored_bytes(self) -> int:
        return self._totals.bytes

    async def get(self, org_id: str, key: bytes) -> CachedAnswer | None:
        """The unexpired answer stored under `key` for `org_id`; None on a miss or any
        failure. A lookup is one read; a hit is counted on the entry and refreshes its last
        use in a batch written within `touch_every_us` (or `touch_batch` entries), by the
        lookup that finds the batch due (`flush`), and before every maintenance pass."""
        try:
            entry = await self.store.get(org_id, key, now=self.clock())
            answer = None if entry is None else self._open(entry)
        except CacheUnopenable as exc:
            self.counters.unopenable += 1
            self._failed("open", exc, count=False)
            answer = None
        except Exception as exc:  # the failure policy (module docstring)
            self._failed("get", exc)
            answer = None
        if answer is None:
            self.counters.misses += 1
        else:
            self.counters.hits += 1
            used = (org_id, key)
            self._used[used] = self._used.get(used, 0) + 1
        await self._flush_if_due()
        return answer

    async def _flush_if_due(self) -> None:
        if not self._used:
            return
        now = self.clock()
        if self._touched_at is None:
            self._touched_at = now
        if len(self._used) >= self.touch_batch or now - self._touched_at >= self.touch_every_us:
            await self.flush()

    async def flush(self) -> None:
        """Write the hits counted since the last flush, and the entries' last use (now), in
        one batch; a failure drops them (counted)."""
        used, self._used = self._used, {}
        now = self.clock()
        self._touched_at = now
        if not used:
            return
        try:
            await self.store.touch([(o, k, n) for (o, k), n in used.items()], now=now)
        except Exception as exc:
            self._failed("touch", exc)

    def _open(self, entry: StoredEntry) -> CachedAnswer:
        if entry.kind not in _KINDS:
            raise CacheUnopenable("unknown kind")
        body = self.sealer.open(entry.body, entry.org_id, entry.key, f"body:{entry.kind}")
        kind: Kind = "json" if entry.kind == "json" else "sse"
        return CachedAnswer(
            kind, body, entry.prompt_tokens, entry.completion_tokens, entry.created_at
        )

    async def put(
        self,
        org_id: str,
        key: bytes,
        answer: CachedAnswer,
        *,
        model: str,
        key_id: str | None,
        ttl_s: float,
        scope: bytes | None = None,
        query: str | None = None,
        vector: bytes | None = None,
    ) -> None:
        """Store `answer` for `ttl_s` seconds (replacing one under the same key). A semantic
        entry gives `scope`, `query` and `vector` (all three, or it is stored as exact only).
        Not stored: answers over `max_entry_bytes`, a non-positive TTL, and on failure."""
        if len(answer.body) > self.max_entry_bytes:
            self.counters.oversize += 1
            return
        if not (math.isfinite(ttl_s) and ttl_s > 0) or answer.kind not in _KINDS:
            return
        now = self.clock()
        try:
            seal = self.sealer.seal
            sealed_query = sealed_vector = None
            if scope is not None and query is not None and vector is not None:
                sealed_query = seal(query.encode(), org_id, key, "query")
                sealed_vector = seal(vector, org_id, key, "vector")
            entry = StoredEntry(
                org_id=org_id,
                key=key,
                model=model,
                key_id=key_id,
                kind=answer.kind,
                body=seal(answer.body, org_id, key, f"body:{answer.kind}"),
                prompt_tokens=answer.prompt_tokens,
                completion_tokens=answer.completion_tokens,
                created_at=now,
                expires_at=now + min(int(ttl_s * 1_000_000), 2**62 - now),
                scope=None if sealed_query is None else scope,
                query=sealed_query,
                vector=sealed_vector,
            )
            await self.store.put(entry, now=now)
        except CacheUnopenable as exc:  # a retired master key: nothing sealed under it
            self._failed("seal", exc)
            return
        except Exception as exc:
            self._failed("put", exc)
            return
        self.counters.stores += 1
        await self._flush_if_due()
        totals = self._totals
        totals.entries += 1
        totals.bytes += entry.size
        totals.since += 1
        if (
            not totals.measured
            or totals.since >= self.measure_every
            or totals.entries > self.max_entries
            or totals.bytes > self.max_bytes
        ):
            await self.maintain()

    async def maintain(self) -> None:
        """One pass: expired entries go, then the least recently used down to `low_water` of
        each bound. At most one at a time per instance; failures are counted, not raised."""
        totals = self._totals
        if totals.running:
            return
        totals.running = True
        try:
            await self.flush()  # eviction sees every recent use
            done = await self.store.maintain(
                now=self.clock(),
                max_entries=max(0, int(self.max_entries * self.low_water)),
                max_bytes=max(0, int(self.max_bytes * self.low_water)),
            )
        except Exception as exc:
            self._failed("maintain", exc)
            totals.since = 0  # not again at once: after another `measure_every` puts
            return
        finally:
            totals.running = False
        self.counters.maintenance += 1
        self.counters.evictions += done.evicted
        self.counters.expired += done.expired
        totals.entries, totals.bytes = done.entries, done.bytes
        totals.measured, totals.since = True, 0

    async def candidates(
        self, org_id: str, scope: bytes, *, limit: int = 256
    ) -> list[tuple[bytes, bytes, str]]:
        """(entry key, vector, query text) of the unexpired semantic entries in `scope`,
        newest first; an entry that does not open is left out, a failure gives []."""
        try:
            found = await self.store.candidates(org_id, scope, now=self.clock(), limit=limit)
        except Exception as exc:
            self._failed("candidates", exc)
            return []
        out = []
        for c in found:
            try:
                vector = self.sealer.open(c.vector, org_id, c.key, "vector")
                query = self.sealer.open(c.query, org_id, c.key, "query").decode()
            except (CacheUnopenable, UnicodeDecodeError) as exc:
                self.counters.unopenable += 1
                self._failed("open", exc, count=False)
                continue
            out.append((c.key, vector, query))
        return out

    async def purge(
        self,
        org_id: str,
        *,
        model: str | None,
        key_id: str | None,
        older_than_s: float | None,
        by_key_id: str | None,
    ) -> int:
        """Delete the org's entries matching every criterion given (none: all), writing one
        `cache.purged` event with them; returns how many (unexpired) entries went. Raises the
        store's failure."""
        now = self.clock()
        scope: dict[str, Any] = {}
        if model is not None:
            scope["model"] = model
        if key_id is not None:
            scope["key_id"] = key_id
        before = None
        if older_than_s is not None:
            scope["older_than_s"] = older_than_s
            before = now - min(int(older_than_s * 1_000_000), now)

        def data(purged: int) -> dict[str, Any]:
            return {"scope": scope, "purged": purged, "by_key_id": by_key_id}

        purged = await self.store.purge(
            org_id, model=model, key_id=key_id, created_before=before, now=now, event_data=data
        )
        self.counters.purged += purged
        self._totals.since = self.measure_every  # measure again after the next put
        return purged

    def statistics(self) -> dict[str, object]:
        return {**self.counters.as_dict(), "entries": self.entries, "bytes": self.stored_bytes}

    def _failed(self, what: str, exc: Exception, *, count: bool = True) -> None:
        if count:
            self.counters.failures += 1
        now = self.clock()
        if now - self._logged_at >= _LOG_EVERY_US:
            self._logged_at = now
            # A store's own failure by its type (no content); anything else with its
            # traceback, as the bug it likely is (the values in play are sealed).
            expected = isinstance(exc, StorageError | CacheUnopenable)
            log.warning(
                "response cache %s failed (a miss): %s",
                what,
                type(exc).__name__,
                exc_info=None if expected else exc,
            )
