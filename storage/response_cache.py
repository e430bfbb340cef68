"""The response cache's store in the database (migration 0019), and the interface the Redis
store (storage/response_cache_redis.py) shares with it.

Rows hold only sealed values (`body`, `query`, `vector`): sealing and opening are the
caller's (services/cache/store.py). Lookups hide expired rows at once; `maintain` deletes them
later, and evicts the least recently used rows past the bounds. Times are wall-clock
microseconds given by the caller (its clock, which tests drive).

A purge deletes the organization's matching rows and writes its one `cache.purged` event in
the same transaction (storage/events.py), so the event exists exactly when the rows went.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from storage import events
from storage.database import Database

PURGED = "cache.purged"
EventData = Callable[[int], dict[str, Any]]  # the number purged -> the event's data


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """An entry as stored: sealed values only (repr shows no content)."""

    org_id: str
    key: bytes
    model: str
    key_id: str | None
    kind: str  # "json" | "sse"
    body: bytes  # sealed
    prompt_tokens: int
    completion_tokens: int
    created_at: int  # µs
    expires_at: int  # µs
    scope: bytes | None = None
    query: bytes | None = None  # sealed
    vector: bytes | None = None  # sealed

    @property
    def size(self) -> int:
        return len(self.body) + len(self.query or b"") + len(self.vector or b"")

    def __repr__(self) -> str:
        return f"StoredEntry(org_id={self.org_id!r}, key={self.key.hex()[:16]}…, body=***)"


@dataclass(frozen=True, slots=True)
class Candidate:
    key: bytes
    vector: bytes  # sealed
    query: bytes  # sealed


@dataclass(frozen=True, slots=True)
class Maintenance:
    """What one `maintain` pass did, and the totals after it."""

    expired: int
    evicted: int
    entries: int
    bytes: int


class CacheStore(Protocol):
    """What services/cache/store.py needs of a store. Failures raise StorageError
    (StorageUnavailable for an unreachable database or Redis)."""

    async def get(self, org_id: str, key: bytes, *, now: int) -> StoredEntry | None: ...

    async def touch(self, used: Sequence[tuple[str, bytes, int]], *, now: int) -> None: ...

    async def put(self, entry: StoredEntry, *, now: int) -> None: ...

    async def candidates(
        self, org_id: str, scope: bytes, *, now: int, limit: int
    ) -> list[Candidate]: ...

    async def purge(
        self,
        org_id: str,
        *,
        model: str | None,
        key_id: str | None,
        created_before: int | None,
        now: int,
        event_data: EventData,
    ) -> int: ...

    async def maintain(self, *, now: int, max_entries: int, max_bytes: int) -> Maintenance: ...


_ENTRY = (
    "org_id, key, model, key_id, kind, body, prompt_tokens, completion_tokens, created_at,"
    " expires_at, scope, query, vector"
)
_BATCH = 1000  # rows deleted or touched per statement


def _entry(row: dict[str, Any]) -> StoredEntry:
    def blob(value: Any) -> bytes | None:
        return None if value is None else bytes(value)

    return StoredEntry(
        org_id=row["org_id"],
        key=bytes(row["key"]),
        model=row["model"],
        key_id=row["key_id"],
        kind=row["kind"],
        body=bytes(row["body"]),
        prompt_tokens=int(row["prompt_tokens"]),
        completion_tokens=int(row["completion_tokens"]),
        created_at=int(row["created_at"]),
        expires_at=int(row["expires_at"]),
        scope=blob(row["scope"]),
        query=blob(row["query"]),
        vector=blob(row["vector"]),
    )


class ResponseCacheRepository:
    """The `store = "database"` store: SQLite embedded, or the PostgreSQL every instance
    shares (then the bounds hold across instances)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self, org_id: str, key: bytes, *, now: int) -> StoredEntry | None:
        """The unexpired entry: a read (on the read pool), which neither counts the hit nor
        refreshes its use: `touch` does, later and in batches."""
        row = await self._db.fetchrow(
            f"SELECT {_ENTRY} FROM response_cache"
            " WHERE org_id = :org AND key = :key AND expires_at > :now",
            {"org": org_id, "key": key, "now": now},
        )
        return None if row is None else _entry(row)

    async def touch(self, used: Sequence[tuple[str, bytes, int]], *, now: int) -> None:
        """Entries used since the last touch, as (org id, key, hits): their last use becomes
        `now` and their hits grow, in one transaction with one statement per distinct hit
        count (mostly one)."""
        by_count: dict[int, list[tuple[str, bytes]]] = {}
        for org_id, key, hits in used:
            by_count.setdefault(hits, []).append((org_id, key))
        async with self._db.transaction() as tx:
            for hits, entries in by_count.items():
                for start in range(0, len(entries), _BATCH):
                    chunk = entries[start : start + _BATCH]
                    params: dict[str, object] = {"now": now, "hits": hits}
                    pairs = []
                    for i, (org_id, key) in enumerate(chunk):
                        params[f"o{i}"], params[f"k{i}"] = org_id, key
                        pairs.append(f"(:o{i}, :k{i})")
                    await tx.execute(
                        "UPDATE response_cache SET last_used_at = :now, hits = hits + :hits"
                        f" WHERE (org_id, key) IN ({', '.join(pairs)})",
                        params,
                    )

    async def put(self, entry: StoredEntry, *, now: int) -> None:
        """Store or replace the entry (a replaced one starts over: new time, no hits)."""
        await self._db.execute(
            f"INSERT INTO response_cache ({_ENTRY}, size, last_used_at, hits) VALUES (:org_id,"
            " :key, :model, :key_id, :kind, :body, :pt, :ct, :created_at, :expires_at, :scope,"
            " :query, :vector, :size, :now, 0) ON CONFLICT (org_id, key) DO UPDATE SET"
            " model = excluded.model, key_id = excluded.key_id, kind = excluded.kind,"
            " body = excluded.body, prompt_tokens = excluded.prompt_tokens,"
            " completion_tokens = excluded.completion_tokens, created_at = excluded.created_at,"
            " expires_at = excluded.expires_at, scope = excluded.scope, query = excluded.query,"
            " vector = excluded.vector, size = excluded.size,"
            " last_used_at = excluded.last_used_at, hits = 0",
            {
                "org_id": entry.org_id,
                "key": entry.key,
                "model": entry.model,
                "key_id": entry.key_id,
                "kind": entry.kind,
                "body": entry.body,
                "pt": entry.prompt_tokens,
                "ct": entry.completion_tokens,
                "created_at": entry.created_at,
                "expires_at": entry.expires_at,
                "scope": entry.scope,
                "query": entry.query,
                "vector": entry.vector,
                "size": entry.size,
                "now": now,
            },
        )

    async def candidates(
        self, org_id: str, scope: bytes, *, now: int, limit: int
    ) -> list[Candidate]:
        """The scope's unexpired semantic entries, newest first (index: org, scope, created)."""
        rows = await self._db.fetch(
            "SELECT key, vector, query FROM response_cache"
            " WHERE org_id = :org AND scope = :scope AND expires_at > :now"
            " AND vector IS NOT NULL AND query IS NOT NULL"
            " ORDER BY created_at DESC LIMIT :limit",
            {"org": org_id, "scope": scope, "now": now, "limit": limit},
        )
        return [Candidate(bytes(r["key"]), bytes(r["vector"]), bytes(r["query"])) for r in rows]

    async def hits(self, org_id: str, key: bytes) -> int | None:
        """The entry's hit count (tests, statistics); None without one."""
        value = await self._db.fetchval(
            "SELECT hits FROM response_cache WHERE org_id = :org AND key = :key",
            {"org": org_id, "key": key},
        )
        return None if value is None else int(value)

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
        """Delete the org's entries matching every criterion given (none: all of them) and
        write one `cache.purged` event, in one transaction. Returns how many unexpired entries
        went (expired ones matching go too, uncounted: they were no longer served)."""
        where, params = ["org_id = :org"], {"org": org_id, "now": now}
        if model is not None:
            where.append("model = :model")
            params["model"] = model
        if key_id is not None:
            where.append("key_id = :key_id")
            params["key_id"] = key_id
        if created_before is not None:
            where.append("created_at < :before")
            params["before"] = created_before
        async with self._db.transaction() as tx:
            rows = await tx.fetch(
                f"DELETE FROM response_cache WHERE {' AND '.join(where)} RETURNING expires_at",
                params,
            )
            purged = sum(1 for r in rows if int(r["expires_at"]) > now)
            await events.append(tx, org_id, PURGED, event_data(purged))
        return purged

    async def totals(self) -> tuple[int, int]:
        """Rows and stored bytes, expired or not."""
        row = await self._db.fetchrow(
            "SELECT COUNT(*) AS n, COALESCE(SUM(size), 0) AS b FROM response_cache"
        )
        assert row is not None
        return int(row["n"]), int(row["b"])

    async def maintain(self, *, now: int, max_entries: int, max_bytes: int) -> Maintenance:
        """Delete expired rows (in batches), then the least recently used until at most
        `max_entries` rows of at most `max_bytes` remain. The caller calls this now and then,
        not per put, and passes bounds below its limits so that a pass makes room for many
        puts (services/cache/store.py)."""
        expired = 0
        while True:
            gone = await self._db.execute(
                "DELETE FROM response_cache WHERE (org_id, key) IN (SELECT org_id, key"
                " FROM response_cache WHERE expires_at <= :now ORDER BY expires_at LIMIT :n)",
                {"now": now, "n": _BATCH},
            )
            expired += gone
            if gone < _BATCH:
                break
        entries, size = await self.totals()
        evicted = 0
        while entries > max_entries or size > max_bytes:
            over_entries = entries - max_entries
            average = max(1, size // max(1, entries))
            over_bytes = -(-(size - max_bytes) // average) if size > max_bytes else 0
            n = min(_BATCH, max(1, over_entries, over_bytes))
            async with self._db.transaction() as tx:
                rows = await tx.fetch(
                    "DELETE FROM response_cache WHERE (org_id, key) IN (SELECT org_id, key"
                    " FROM response_cache ORDER BY last_used_at LIMIT :n) RETURNING size",
                    {"n": n},
                )
            if not rows:
                break
            evicted += len(rows)
            entries -= len(rows)
            size -= sum(int(r["size"]) for r in rows)
        return Maintenance(expired, evicted, entries, size)

    async def raw(self, org_id: str, key: bytes) -> dict[str, Any] | None:
        """The row as stored (tests: what is at rest)."""
        return await self._db.fetchrow(
            f"SELECT {_ENTRY}, size, last_used_at, hits FROM response_cache"
            " WHERE org_id = :org AND key = :key",
            {"org": org_id, "key": key},
        )
