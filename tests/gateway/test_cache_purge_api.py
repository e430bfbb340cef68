"""POST /v1/cache/purge over real HTTP, on every storage backend: each scope deletes what it
names in the caller's organization only and writes one `cache.purged` event; management keys
only; hostile bodies are 400s in the OpenAI error shape, never 500s."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from gateway.cache.area import CacheArea
from protocol.webhook_samples import SAMPLES
from services.cache.store import CachedAnswer, ResponseCache
from tests.gateway.keys_client import create_key, error_of
from tests.harness import Gateway, gateway_config, running_gateway
from tests.metrics_lint import lint
from tests.metrics_lint import value as sample_value

pytestmark = pytest.mark.storage

PATH = "/v1/cache/purge"


def _cache(gw: Gateway) -> ResponseCache:
    area = gw.runtime.area(CacheArea)
    assert area.cache is None  # no model caches in the harness's default config
    return area.store  # purges work all the same


def _key(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


async def _fill(cache: ResponseCache, org_id: str) -> None:
    answer = CachedAnswer("json", b'{"ok":true}', 1, 1, 0)
    for name, model, key_id in (("a", "m1", "key_1"), ("b", "m1", "key_2"), ("c", "m2", None)):
        await cache.put(org_id, _key(name), answer, model=model, key_id=key_id, ttl_s=600)


async def _live(cache: ResponseCache, org_id: str) -> list[str]:
    return [n for n in "abc" if await cache.get(org_id, _key(n)) is not None]


async def _purge_events(gw: Gateway) -> list[dict[str, Any]]:
    events = await gw.runtime.storage.events.list_for_org(gw.org_id)
    return [e.data for e in events if e.type == "cache.purged"]


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return (
        "number"
        if isinstance(value, int | float) and not isinstance(value, bool)
        else type(value).__name__
    )


async def test_each_scope_purges_what_it_names_with_one_event(gateway: Gateway) -> None:
    gw = gateway
    cache = _cache(gw)
    other = (await gw.runtime.storage.orgs.create("other")).id
    await _fill(cache, other)
    management_key_id = (await gw.runtime.auth.authenticate(f"Bearer {gw.management_key}")).key_id
    for body, purged, live in (
        ({"model": "m1"}, 2, ["c"]),
        ({"key_id": "key_1"}, 1, ["b", "c"]),
        ({"older_than_s": 3600}, 0, ["a", "b", "c"]),
        ({"model": "m1", "key_id": "key_2", "older_than_s": 0.000001}, 1, ["a", "c"]),
        ({}, 3, []),
        (None, 3, []),
    ):
        await _fill(cache, gw.org_id)
        if body is None:
            r = await gw.client.post(PATH, headers=gw.auth())  # no body at all
        else:
            r = await gw.client.post(PATH, json=body, headers=gw.auth())
        assert r.status_code == 200, r.text
        assert r.json() == {"purged": purged}, body
        assert await _live(cache, gw.org_id) == live, body
        assert await _live(cache, other) == ["a", "b", "c"]  # another org untouched
        for name in live:  # the next round starts from the full set again
            await cache.get(gw.org_id, _key(name))
    events = await _purge_events(gw)
    assert [e["purged"] for e in events] == [2, 1, 0, 1, 3, 3]
    assert events[0] == {"scope": {"model": "m1"}, "purged": 2, "by_key_id": management_key_id}
    assert events[3]["scope"] == {"model": "m1", "key_id": "key_2", "older_than_s": 0.000001}
    assert events[4]["scope"] == {} and events[5]["scope"] == {}
    sample = SAMPLES["cache.purged"]  # what test events send: the real shape
    assert _shape({**sample, "scope": {}}) == _shape({**events[0], "scope": {}})
    for name, value in sample["scope"].items():
        assert _shape(value) == _shape(events[3]["scope"][name])


async def test_management_keys_only(gateway: Gateway) -> None:
    gw = gateway
    secret = await create_key(gw)
    r = await gw.client.post(PATH, json={}, headers=gw.auth(secret["key"]))
    assert r.status_code == 403, r.text
    assert error_of(r)["type"]
    r = await gw.client.post(PATH, json={})
    assert r.status_code == 401
    r = await gw.client.post(PATH, json={}, headers=gw.auth("service_mk_wrong"))
    assert r.status_code == 401
    assert await _purge_events(gw) == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"model": "m", "extra": 1}', "extra"),
        (b'{"model": 5}', "model"),
        (b'{"model": ""}', "model"),
        (b'{"model": "a\\u0000b"}', "model"),
        (b'{"key_id": "key\\nx"}', "key_id"),
        (b'{"key_id": ["k"]}', "key_id"),
        (b'{"older_than_s": 0}', "older_than_s"),
        (b'{"older_than_s": -5}', "older_than_s"),
        (b'{"older_than_s": "60"}', "older_than_s"),
        (b'{"older_than_s": 1e400}', None),
        (b'{"older_than_s": 99999999999999999999999999999999}', None),
        (b'{"older_than_s": 1e300}', "older_than_s"),
        (b'{"older_than_s": true}', "older_than_s"),
        (b"[]", None),
        (b'"purge"', None),
        (b"{", None),
        (b'{"model": "\xff"}', None),
        (b'{"model": "' + b"m" * 300 + b'"}', "model"),
    ],
)
async def test_hostile_bodies_are_400s(gateway: Gateway, body: bytes, param: str | None) -> None:
    gw = gateway
    headers = {**gw.auth(), "Content-Type": "application/json"}
    r = await gw.client.post(PATH, content=body, headers=headers)
    assert r.status_code == 400, (body, r.text)
    error = error_of(r)
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param, error
    assert await _purge_events(gw) == []


async def test_described_in_openapi(gateway: Gateway) -> None:
    document = (await gateway.client.get("/openapi.json")).json()
    operation = document["paths"][PATH]["post"]
    assert operation["requestBody"]["required"] is False
    assert {"200", "400", "401", "403"} <= set(operation["responses"])


async def test_the_cache_is_on_when_a_model_caches(database_url: str, tmp_path: Path) -> None:
    toml = (
        '[[providers]]\nname = "sim"\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '[[models]]\nid = "m"\nprovider = "sim"\nupstream = "m"\ncache = true\n'
    )
    async with running_gateway(gateway_config(database_url, tmp_path, toml=toml)) as gw:
        area = gw.runtime.area(CacheArea)
        assert area.cache is area.store
        r = await gw.client.post(PATH, headers=gw.auth())
        assert r.json() == {"purged": 0}
        families = lint((await gw.client.get("/metrics")).text)
        operations = families["gateway_cache_operations"]  # a running total: a counter
        assert operations.type == "counter"
        assert sample_value(operations, "gateway_cache_operations_total", outcome="purged") == 0
        assert {s.labels["outcome"] for s in operations.samples} >= {"hits", "purged"}
        assert families["gateway_cache_entries"].type == "gauge"
