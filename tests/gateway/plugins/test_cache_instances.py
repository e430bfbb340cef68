"""The response cache shared by two instances of one gateway (one database, one Redis): an
answer stored by one is a hit on the other, in both stores; a purge on one empties it for
both, and is announced once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from bench.upstream import UpstreamServer, serve_upstream
from gateway.inference.area import InferenceArea
from services.cache.plugin import ResponseCachePlugin
from tests.backends import REDIS_URL
from tests.gateway.plugins.rig import chat_body, events_of_org
from tests.harness import Gateway
from tests.inference import inference_toml, two_gateways
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.storage,
    pytest.mark.skipif(REDIS_URL is None, reason="needs GATEWAY_TEST_REDIS_URL"),
]


@asynccontextmanager
async def shared(
    database_url: str, tmp_path: Path, store: str
) -> AsyncIterator[tuple[Gateway, Gateway, UpstreamServer]]:
    assert REDIS_URL is not None
    async with trio.open_nursery() as nursery:
        upstream: UpstreamServer = await nursery.start(serve_upstream)
        toml = inference_toml(upstream.url) + f'[cache]\nenabled = true\nstore = "{store}"\n'
        async with two_gateways(database_url, tmp_path, REDIS_URL, toml) as (a, b):
            topup = await a.client.post(
                "/v1/credits/topup", json={"amount_usd": 10}, headers=a.auth()
            )
            assert topup.status_code == 200
            yield a, b, upstream
        nursery.cancel_scope.cancel()


def cache_of(gateway: Gateway) -> ResponseCachePlugin:
    plugins = gateway.runtime.area(InferenceArea).deps.plugins
    assert plugins is not None and plugins.cache is not None
    return plugins.cache


def chats(upstream: UpstreamServer) -> int:
    return sum(1 for r in upstream.requests if r.path.endswith("/chat/completions"))


@pytest.mark.parametrize("store", ["database", "redis"])
async def test_one_instance_stores_the_other_hits_and_a_purge_is_for_both(
    database_url: str, tmp_path: Path, store: str
) -> None:
    if database_url.startswith("sqlite") and store == "database":
        pytest.skip("two instances share a database on PostgreSQL")
    async with shared(database_url, tmp_path, store) as (a, b, upstream):
        body = chat_body("What is 2 + 2?", temperature=0)
        first = await a.client.post("/v1/chat/completions", json=body, headers=a.auth())
        assert first.headers["x-gateway-cache"] == "miss"

        await wait_until(lambda: cache_of(a).stats.stores == 1)  # stored in the background
        second = await b.client.post("/v1/chat/completions", json=body, headers=a.auth())
        assert second.headers["x-gateway-cache"] == "hit" and second.content == first.content
        assert chats(upstream) == 1
        misses_before = chats(upstream)
        purge = await b.client.post("/v1/cache/purge", json={}, headers=a.auth())
        assert purge.status_code == 200 and purge.json()["purged"] >= 1
        again = await a.client.post("/v1/chat/completions", json=body, headers=a.auth())
        assert again.headers["x-gateway-cache"] == "miss"
        assert chats(upstream) == misses_before + 1
        purged = await events_of_org(a, "cache.purged")
        assert len(purged) == 1 and purged[0].data["purged"] == purge.json()["purged"]
