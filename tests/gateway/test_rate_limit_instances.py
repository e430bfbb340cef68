"""With Redis configured, a key's rate limit holds exactly across gateway instances."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from bench.upstream import serve_upstream
from tests.backends import REDIS_URL
from tests.gateway.keys_client import create_key
from tests.harness import gateway_config, running_gateway
from tests.inference import inference_toml, two_instances
from tests.tcp_forwarder import forwarding

pytestmark = pytest.mark.skipif(REDIS_URL is None, reason="needs GATEWAY_TEST_REDIS_URL")


async def test_two_instances_share_one_exact_limit(database_url: str, tmp_path: Path) -> None:
    assert REDIS_URL is not None
    rpm, attempts = 20, 60
    async with two_instances(database_url, tmp_path, REDIS_URL) as (a, b):
        key = (await create_key(a, name="shared", rate_limit_rpm=rpm))["key"]
        await a.runtime.storage.ledger.apply(a.org_id, "adjustment", 10**7, "test credit")
        statuses: list[int] = []
        body = {
            "model": "small",
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 1,
        }

        async def call(gw_index: int) -> None:
            gw = (a, b)[gw_index % 2]
            r = await gw.client.post("/v1/chat/completions", json=body, headers=gw.auth(key))
            statuses.append(r.status_code)

        async with trio.open_nursery() as burst:
            for i in range(attempts):
                burst.start_soon(call, i)
    assert statuses.count(200) == rpm
    assert statuses.count(429) == attempts - rpm


async def test_a_full_key_inbox_answers_503_actor_overloaded(
    database_url: str, tmp_path: Path
) -> None:
    assert REDIS_URL is not None
    url = urlsplit(REDIS_URL)
    async with (
        trio.open_nursery() as nursery,
        forwarding(url.hostname or "127.0.0.1", url.port or 6379) as redis,
    ):
        upstream = await nursery.start(serve_upstream)
        toml = inference_toml(upstream.url) + "\n[actors.rate_limiter]\ninbox_capacity = 1\n"
        through = f"redis://127.0.0.1:{redis.port}{url.path or '/0'}"
        config = gateway_config(database_url, tmp_path, toml=toml, GATEWAY_REDIS_URL=through)
        async with running_gateway(config) as gw:
            key = (await create_key(gw, name="tiny", rate_limit_rpm=10_000))["key"]
            responses: list[tuple[int, str | None, str | None]] = []

            async def call() -> None:
                r = await gw.client.get("/v1/models", headers=gw.auth(key))
                code = r.json()["error"]["code"] if r.status_code != 200 else None
                responses.append((r.status_code, code, r.headers.get("retry-after")))

            await call()  # admitted: the key's actor is up
            # Redis stops answering: the actor waits on its script (up to its timeout) while
            # the burst arrives, so its one-message inbox is full for all but one of them.
            redis.blackhole()
            async with trio.open_nursery() as burst:
                for _ in range(40):
                    burst.start_soon(call)
            redis.heal()
        nursery.cancel_scope.cancel()
    assert responses[0] == (200, None, None)
    overloaded = [r for r in responses if r[0] == 503]
    assert len(overloaded) >= 30
    assert all(code == "actor_overloaded" and after for _, code, after in overloaded)
