"""The response cache over the Redis store (storage/response_cache_redis.py) on a real Redis:
the same behaviour as the database store (round trips, expiry on Trio's MockClock, LRU bounds,
isolation, sealing, candidates, purges with one event each), and Redis down is a miss.

Each test has a key prefix of its own, so the global LRU and byte counts are the test's."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import coredis
import pytest
import trio
import trio.testing

from actors.webhooks.clock import WallClock
from services.cache.sealing import CacheSealer
from services.cache.store import ResponseCache
from storage import Storage
from storage.errors import StorageUnavailable
from storage.response_cache_redis import RedisCacheStore
from tests.backends import REDIS_URL
from tests.services.test_cache_store import ANSWER, MASTER, PROMPT, answer, key

pytestmark = [
    pytest.mark.storage,
    pytest.mark.skipif(REDIS_URL is None, reason="needs GATEWAY_TEST_REDIS_URL"),
]


@pytest.fixture
async def redis() -> AsyncIterator[coredis.Redis[Any]]:
    assert REDIS_URL is not None
    async with coredis.Redis.from_url(REDIS_URL) as client:
        yield client


@pytest.fixture
def prefix() -> str:
    return f"test:cache:{os.urandom(6).hex()}:"


def cache(redis: coredis.Redis[Any], storage: Storage, prefix: str, **bounds: int) -> ResponseCache:
    return ResponseCache(
        RedisCacheStore(redis, storage.db, prefix=prefix),
        CacheSealer(MASTER),
        WallClock().now_us,
        max_entries=bounds.get("max_entries", 1000),
        max_bytes=bounds.get("max_bytes", 10**9),
        max_entry_bytes=bounds.get("max_entry_bytes", 10**6),
    )


async def test_round_trip_expiry_and_isolation(
    redis: coredis.Redis[Any], storage: Storage, prefix: str, mock_clock: trio.testing.MockClock
) -> None:
    c = cache(redis, storage, prefix)
    assert await c.get("org_a", key("k")) is None
    await c.put("org_a", key("k"), answer(), model="m", key_id="key_1", ttl_s=30)
    got = await c.get("org_a", key("k"))
    assert got is not None and (got.kind, got.body, got.prompt_tokens) == ("json", ANSWER, 11)
    assert await c.get("org_b", key("k")) is None
    await c.flush()
    assert int(await redis.hget(f"{prefix}E:org_a:{key('k').hex()}", "hits") or 0) == 1
    ttl = await redis.pttl(f"{prefix}E:org_a:{key('k').hex()}")
    assert 0 < ttl <= 31_000  # Redis expires it too
    mock_clock.jump(30)
    assert await c.get("org_a", key("k")) is None
    await c.maintain()
    assert c.counters.expired == 1 and c.entries == 0 and c.stored_bytes == 0
    assert await redis.zcard(f"{prefix}O:org_a") == 0


async def test_lru_by_count_and_bytes_and_oversize(
    redis: coredis.Redis[Any], storage: Storage, prefix: str, mock_clock: trio.testing.MockClock
) -> None:
    c = cache(redis, storage, prefix, max_entries=10, max_bytes=10_000, max_entry_bytes=1000)
    for i in range(10):
        await c.put("org_a", key(f"{i}"), answer(), model="m", key_id=None, ttl_s=600)
        mock_clock.jump(1)
    for i in (0, 1):
        assert await c.get("org_a", key(f"{i}")) is not None
    mock_clock.jump(1)
    await c.put("org_a", key("10"), answer(), model="m", key_id=None, ttl_s=600)
    assert c.counters.evictions == 2 and c.entries == 9
    assert [i for i in range(11) if await c.get("org_a", key(f"{i}")) is None] == [2, 3]
    big = answer(b"x" * 1000)  # 1028 bytes sealed
    for i in range(9):
        await c.put("org_a", key(f"big{i}"), big, model="m", key_id=None, ttl_s=600)
        mock_clock.jump(1)
    assert c.stored_bytes <= 10_000 and c.counters.evictions > 2
    assert c.stored_bytes == int(await redis.get(f"{prefix}bytes") or 0)
    await c.put("org_a", key("huge"), answer(b"x" * 1001), model="m", key_id=None, ttl_s=600)
    assert c.counters.oversize == 1 and await c.get("org_a", key("huge")) is None


async def test_sealed_in_redis_and_a_copied_entry_does_not_open(
    redis: coredis.Redis[Any], storage: Storage, prefix: str
) -> None:
    c = cache(redis, storage, prefix)
    vector = b"\x01\x02\x03\x04" * 8
    k = key("k")
    await c.put(
        "org_a", k, answer(), model="m", key_id=None, ttl_s=60,
        scope=key("s"), query=PROMPT, vector=vector,
    )  # fmt: skip
    stored = await redis.hgetall(f"{prefix}E:org_a:{k.hex()}")
    at_rest = b"".join(v for v in stored.values() if isinstance(v, bytes))
    for plain in (ANSWER, b"zebra-answer", PROMPT.encode(), b"aardvarks", vector):
        assert plain not in at_rest
    await redis.hset(f"{prefix}E:org_b:{k.hex()}", stored)  # copied to another org
    assert await c.get("org_b", k) is None and c.counters.unopenable == 1
    assert await c.candidates("org_a", key("s")) == [(k, vector, PROMPT)]


async def test_candidates_newest_first_in_scope(
    redis: coredis.Redis[Any], storage: Storage, prefix: str, mock_clock: trio.testing.MockClock
) -> None:
    c = cache(redis, storage, prefix)
    for i, ttl in enumerate((100, 5, 100, 100)):
        await c.put(
            "org_a", key(f"{i}"), answer(), model="m", key_id=None, ttl_s=ttl,
            scope=key("s1" if i != 3 else "s2"), query=f"q{i}", vector=bytes([i]) * 4,
        )  # fmt: skip
        mock_clock.jump(1)
    mock_clock.jump(10)
    assert [q for _, _, q in await c.candidates("org_a", key("s1"))] == ["q2", "q0"]
    assert [q for _, _, q in await c.candidates("org_a", key("s1"), limit=1)] == ["q2"]
    assert await c.candidates("org_b", key("s1")) == []


async def test_purge_scopes_with_one_event_each(
    redis: coredis.Redis[Any], storage: Storage, prefix: str, mock_clock: trio.testing.MockClock
) -> None:
    org = (await storage.orgs.create("x")).id
    c = cache(redis, storage, prefix)
    puts = [("m1", "key_1"), ("m1", "key_2"), ("m2", "key_1"), ("m2", None)]
    for scope, expected, live in (
        ({"model": "m1"}, 2, [2, 3]),
        ({"key_id": "key_1"}, 2, [1, 3]),
        ({"older_than_s": 250.0}, 2, [2, 3]),
        ({"model": "m2", "key_id": "key_1"}, 1, [0, 1, 3]),
        ({}, 4, []),
    ):
        for i, (model, key_id) in enumerate(puts):
            await c.put(org, key(f"{i}"), answer(), model=model, key_id=key_id, ttl_s=6000)
            mock_clock.jump(100)
        await c.put("org_y", key("0"), answer(), model="m1", key_id="key_1", ttl_s=6000)
        args: dict[str, Any] = {"model": None, "key_id": None, "older_than_s": None, **scope}
        assert await c.purge(org, **args, by_key_id="key_mgmt") == expected, scope
        assert [i for i in range(4) if await c.get(org, key(f"{i}")) is not None] == live
        assert await c.get("org_y", key("0")) is not None
        await c.purge(org, model=None, key_id=None, older_than_s=None, by_key_id=None)
    events = [e for e in await storage.events.list_for_org(org) if e.type == "cache.purged"]
    assert [e.data["purged"] for e in events] == [2, 2, 2, 2, 2, 2, 1, 3, 4, 0]
    assert events[0].data == {"scope": {"model": "m1"}, "purged": 2, "by_key_id": "key_mgmt"}
    await c.maintain()
    assert c.entries == 1  # org_y's entry only: the indexes and counts followed the purges


async def test_redis_down_is_a_miss(storage: Storage) -> None:
    async with coredis.Redis.from_url("redis://127.0.0.1:1/0") as down:  # nothing listens
        store = RedisCacheStore(down, storage.db, timeout_s=0.5)
        c = ResponseCache(store, CacheSealer(MASTER), WallClock().now_us, 10, 10**6, 10**6)
        await c.put("org_a", key("k"), answer(), model="m", key_id=None, ttl_s=60)
        assert await c.get("org_a", key("k")) is None
        assert await c.candidates("org_a", key("s")) == []
        assert c.counters.failures >= 3
        with pytest.raises(StorageUnavailable):
            await c.purge("org_a", model=None, key_id=None, older_than_s=None, by_key_id=None)
