"""The response cache's store (services/cache/store.py over storage/response_cache.py) on every
database backend: round trips, expiry on Trio's MockClock, LRU bounds, isolation between
organizations, sealing at rest, and purges with their one event each.

Time: pytest-trio's `mock_clock` (no autojump: a database wait must not move time), jumped by
the test; the cache's clock is a WallClock on it (actors/webhooks/clock.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import os

import pytest
import trio
import trio.testing

from actors.webhooks.clock import WallClock
from services.cache.sealing import CacheSealer
from services.cache.store import CachedAnswer, ResponseCache
from storage import Storage
from storage.errors import StorageUnavailable
from storage.response_cache import ResponseCacheRepository

pytestmark = pytest.mark.storage

PROMPT = "the secret prompt about aardvarks"
ANSWER = b'{"choices":[{"message":{"content":"zebra-answer-plaintext"}}]}'


def key(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def answer(body: bytes = ANSWER, kind: str = "json") -> CachedAnswer:
    return CachedAnswer(kind, body, 11, 7, 0)  # type: ignore[arg-type]


def cache(storage: Storage, master: bytes | None = None, **bounds: int) -> ResponseCache:
    return ResponseCache(
        ResponseCacheRepository(storage.db),
        CacheSealer(master or MASTER),
        WallClock().now_us,
        max_entries=bounds.get("max_entries", 1000),
        max_bytes=bounds.get("max_bytes", 10**9),
        max_entry_bytes=bounds.get("max_entry_bytes", 10**6),
    )


MASTER = os.urandom(32)


async def test_round_trip_and_hits_written_in_batches(
    storage: Storage, mock_clock: trio.testing.MockClock
) -> None:
    c = cache(storage)
    repo = ResponseCacheRepository(storage.db)
    assert await c.get("org_a", key("k")) is None
    await c.put("org_a", key("k"), answer(), model="m", key_id="key_1", ttl_s=60)
    got = await c.get("org_a", key("k"))
    assert got is not None and got.body == ANSWER and got.kind == "json"
    assert (got.prompt_tokens, got.completion_tokens) == (11, 7) and got.created_at_us > 0
    await c.get("org_a", key("k"))
    assert await repo.hits("org_a", key("k")) == 0  # not written yet: lookups are reads
    mock_clock.jump(1)
    await c.get("org_a", key("k"))  # a second after the first hit: the batch is due
    assert await repo.hits("org_a", key("k")) == 3
    row = await repo.raw("org_a", key("k"))
    assert row is not None and int(row["last_used_at"]) > int(row["created_at"])
    assert (c.counters.hits, c.counters.misses, c.counters.stores) == (3, 1, 1)
    sse = b"data: {}\n\ndata: [DONE]\n\n"
    await c.put("org_a", key("s"), answer(sse, "sse"), model="m", key_id=None, ttl_s=60)
    again = await c.get("org_a", key("s"))
    assert again is not None and (again.kind, again.body) == ("sse", sse)
    await c.flush()
    assert await repo.hits("org_a", key("s")) == 1


async def test_expires_after_its_ttl(storage: Storage, mock_clock: trio.testing.MockClock) -> None:
    c = cache(storage)
    await c.put("org_a", key("k"), answer(), model="m", key_id=None, ttl_s=30)
    mock_clock.jump(29)
    assert await c.get("org_a", key("k")) is not None
    mock_clock.jump(1)
    assert await c.get("org_a", key("k")) is None
    await c.maintain()
    assert c.counters.expired == 1 and c.entries == 0


async def test_lru_eviction_by_count(storage: Storage, mock_clock: trio.testing.MockClock) -> None:
    c = cache(storage, max_entries=10)
    for i in range(10):
        await c.put("org_a", key(f"{i}"), answer(), model="m", key_id=None, ttl_s=600)
        mock_clock.jump(1)
    for i in (0, 1):  # used again: now the most recent
        assert await c.get("org_a", key(f"{i}")) is not None
    mock_clock.jump(1)
    await c.put("org_a", key("10"), answer(), model="m", key_id=None, ttl_s=600)
    # 11 > 10: one pass down to 9 (90 %), the two least recently used (2 and 3) gone.
    assert c.counters.evictions == 2 and c.entries == 9
    for i in (2, 3):
        assert await c.get("org_a", key(f"{i}")) is None
    for i in (0, 1, 4, 9, 10):
        assert await c.get("org_a", key(f"{i}")) is not None


async def test_lru_eviction_by_bytes_and_oversize(
    storage: Storage, mock_clock: trio.testing.MockClock
) -> None:
    body = b"x" * 1000  # stored: 1028 bytes sealed
    c = cache(storage, max_bytes=5000, max_entry_bytes=1000)
    for i in range(4):
        await c.put("org_a", key(f"{i}"), answer(body), model="m", key_id=None, ttl_s=600)
        mock_clock.jump(1)
    assert c.counters.evictions == 0 and c.stored_bytes == 4 * 1028
    await c.put("org_a", key("4"), answer(body), model="m", key_id=None, ttl_s=600)
    # 5140 > 5000: down to 4500 at most (90 %), so the oldest goes.
    assert c.counters.evictions == 1 and c.stored_bytes == 4 * 1028
    assert await c.get("org_a", key("0")) is None and await c.get("org_a", key("1")) is not None
    await c.put("org_a", key("big"), answer(body + b"y"), model="m", key_id=None, ttl_s=600)
    assert c.counters.oversize == 1 and await c.get("org_a", key("big")) is None


async def test_organizations_never_cross(storage: Storage) -> None:
    c = cache(storage)
    await c.put("org_a", key("k"), answer(b"A"), model="m", key_id=None, ttl_s=60)
    assert await c.get("org_b", key("k")) is None
    await c.put("org_b", key("k"), answer(b"B"), model="m", key_id=None, ttl_s=60)
    a, b = await c.get("org_a", key("k")), await c.get("org_b", key("k"))
    assert a is not None and b is not None and (a.body, b.body) == (b"A", b"B")


async def test_sealed_at_rest_and_a_copied_row_does_not_open(storage: Storage) -> None:
    c = cache(storage)
    vector = b"\x01\x02\x03\x04" * 8
    await c.put(
        "org_a",
        key("k"),
        answer(),
        model="m",
        key_id=None,
        ttl_s=60,
        scope=key("scope"),
        query=PROMPT,
        vector=vector,
    )
    repo = ResponseCacheRepository(storage.db)
    row = await repo.raw("org_a", key("k"))
    assert row is not None
    at_rest = b"".join(bytes(v) for v in row.values() if isinstance(v, bytes | memoryview))
    for plain in (ANSWER, b"zebra-answer", PROMPT.encode(), b"aardvarks", vector):
        assert plain not in at_rest
    stolen = await repo.get("org_a", key("k"), now=0)
    assert stolen is not None
    copied = dataclasses.replace(stolen, org_id="org_b")
    await repo.put(copied, now=0)
    assert await c.get("org_b", key("k")) is None  # the associated data names org_a
    assert await c.candidates("org_b", key("scope")) == []
    assert c.counters.unopenable == 2 and c.counters.failures == 0
    assert await cache(storage, os.urandom(32)).get("org_a", key("k")) is None  # another key
    assert await c.candidates("org_a", key("scope")) == [(key("k"), vector, PROMPT)]


async def test_candidates_newest_first_within_scope_and_unexpired(
    storage: Storage, mock_clock: trio.testing.MockClock
) -> None:
    c = cache(storage)
    for i, ttl in enumerate((100, 5, 100, 100)):
        await c.put(
            "org_a",
            key(f"{i}"),
            answer(),
            model="m",
            key_id=None,
            ttl_s=ttl,
            scope=key("s1" if i != 3 else "s2"),
            query=f"q{i}",
            vector=bytes([i]) * 4,
        )
        mock_clock.jump(1)
    mock_clock.jump(10)  # entry 1 expired
    got = await c.candidates("org_a", key("s1"))
    assert [q for _, _, q in got] == ["q2", "q0"]
    assert [q for _, _, q in await c.candidates("org_a", key("s1"), limit=1)] == ["q2"]
    assert await c.candidates("org_b", key("s1")) == []


async def _live(c: ResponseCache, org: str = "org_x") -> list[int]:
    return [i for i in range(4) if await c.get(org, key(f"{i}")) is not None]


async def test_purge_scopes_with_one_event_each(
    storage: Storage, mock_clock: trio.testing.MockClock
) -> None:
    org = (await storage.orgs.create("x")).id
    c = cache(storage)
    for scope, expected, live in (
        ({"model": "m1"}, 2, [2, 3]),
        ({"key_id": "key_1"}, 2, [1, 3]),
        ({"older_than_s": 250.0}, 2, [2, 3]),  # created 400, 300, 200, 100 s ago
        ({"model": "m2", "key_id": "key_1"}, 1, [0, 1, 3]),
        ({}, 4, []),
    ):
        await storage.db.execute("DELETE FROM response_cache")
        await _fill_org(c, org, mock_clock)
        args = {"model": None, "key_id": None, "older_than_s": None, **scope}
        purged = await c.purge(org, **args, by_key_id="key_mgmt")  # type: ignore[arg-type]
        assert purged == expected, scope
        assert await _live(c, org) == live, scope
        assert await c.get("org_y", key("0")) is not None  # another org untouched
    events = [e for e in await storage.events.list_for_org(org) if e.type == "cache.purged"]
    assert [e.data["purged"] for e in events] == [2, 2, 2, 1, 4]
    assert events[0].data == {"scope": {"model": "m1"}, "purged": 2, "by_key_id": "key_mgmt"}
    assert events[2].data["scope"] == {"older_than_s": 250.0}
    assert events[4].data["scope"] == {}
    assert await c.purge(org, model=None, key_id=None, older_than_s=None, by_key_id=None) == 0
    last = (await storage.events.list_for_org(org))[-1]
    assert last.data == {"scope": {}, "purged": 0, "by_key_id": None}


async def _fill_org(c: ResponseCache, org: str, mock_clock: trio.testing.MockClock) -> None:
    puts = [("m1", "key_1"), ("m1", "key_2"), ("m2", "key_1"), ("m2", None)]
    for i, (model, key_id) in enumerate(puts):
        await c.put(org, key(f"{i}"), answer(), model=model, key_id=key_id, ttl_s=6000)
        mock_clock.jump(100)
    await c.put("org_y", key("0"), answer(), model="m1", key_id="key_1", ttl_s=6000)


class _Failing:
    """A store whose every call raises `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> object:
        async def fail(*args: object, **kwargs: object) -> None:
            raise self.error

        return fail


@pytest.mark.parametrize("error", [StorageUnavailable("down"), RuntimeError("deadlock")])
async def test_a_store_failure_is_a_miss_counted_but_purge_raises(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    store = _Failing(error)
    c = ResponseCache(store, CacheSealer(MASTER), WallClock().now_us, 10, 10**6, 10**6)  # type: ignore[arg-type]
    await c.put("org_a", key("k"), answer(), model="m", key_id=None, ttl_s=60)
    assert await c.get("org_a", key("k")) is None
    assert await c.candidates("org_a", key("s")) == []
    assert c.counters.failures == 3 and c.counters.stores == 0 and c.counters.misses == 1
    logged = [r for r in caplog.records if r.name == "gateway.cache"]
    assert len(logged) == 1  # at most every 10 s
    assert (logged[0].exc_info is None) == isinstance(error, StorageUnavailable)
    assert "zebra" not in caplog.text and "aardvark" not in caplog.text
    with pytest.raises(type(error)):
        await c.purge("org_a", model=None, key_id=None, older_than_s=None, by_key_id=None)


async def test_a_retired_master_key_stores_and_finds_nothing(storage: Storage) -> None:
    retired = False
    c = cache(storage)
    c.sealer = CacheSealer(MASTER, retired=lambda: retired)
    await c.put("org_a", key("k"), answer(), model="m", key_id=None, ttl_s=60)
    retired = True  # a rotation elsewhere: this instance's key is an old one now
    assert await c.get("org_a", key("k")) is None
    await c.put("org_a", key("j"), answer(), model="m", key_id=None, ttl_s=60)
    assert await ResponseCacheRepository(storage.db).raw("org_a", key("j")) is None
    assert (c.counters.unopenable, c.counters.failures, c.counters.stores) == (1, 1, 1)
