"""With Redis configured, a key's rate limit holds exactly across gateway instances."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.backends import REDIS_URL
from tests.gateway.keys_client import create_key
from tests.inference import two_instances

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
