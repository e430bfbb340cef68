"""With Redis, a deployment's cooldown tripped on one instance is honoured by the others within
a second (actors/cooldown_sync.py)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import trio

from bench.upstream import UpstreamServer, serve_upstream
from tests.backends import REDIS_URL
from tests.gateway.routing.rig import MESSAGES, deployments_toml
from tests.harness import OPERATOR_KEY, Gateway
from tests.inference import inference_toml, two_gateways

pytestmark = pytest.mark.skipif(REDIS_URL is None, reason="needs GATEWAY_TEST_REDIS_URL")


def _model(model_id: str) -> str:
    return f"""
[[models]]
id = "{model_id}"
input_usd_per_mtok = 1
output_usd_per_mtok = 2

[[models.deployments]]
provider = "east"
upstream = "sim-a"

[[models.deployments]]
provider = "west"
upstream = "sim-b"
"""


async def _west_state(gw: Gateway, model_id: str) -> str:
    r = await gw.client.get("/v1/admin/actors", headers=gw.auth(OPERATOR_KEY))
    deployments = r.json()["services"]["deployments"][model_id]["deployments"]
    return str(deployments[1]["state"])


async def test_a_trip_on_one_instance_rests_the_deployment_on_the_other(
    database_url: str, tmp_path: Path
) -> None:
    assert REDIS_URL is not None
    model_id = f"ha-{secrets.token_hex(4)}"  # its Redis keys are this test's own
    async with trio.open_nursery() as nursery:
        east: UpstreamServer = await nursery.start(serve_upstream)
        west: UpstreamServer = await nursery.start(serve_upstream)
        toml = inference_toml(east.url) + deployments_toml(east.url, west.url, _model(model_id))
        async with two_gateways(database_url, tmp_path, REDIS_URL, toml) as (a, b):
            key = (await a.client.post("/v1/keys", json={"name": "k"}, headers=a.auth())).json()
            await a.runtime.storage.ledger.apply(a.org_id, "adjustment", 10**7, "test credit")
            west.behavior.fail_status = 500
            body = {"model": model_id, "messages": MESSAGES}
            while len(west.requests) < 3:  # three failures on A trip west there
                r = await a.client.post(
                    "/v1/chat/completions", json=body, headers=a.auth(key["key"])
                )
                assert r.status_code == 200
            assert await _west_state(a, model_id) == "open"
            tripped = trio.current_time()
            while await _west_state(b, model_id) != "open":
                assert trio.current_time() - tripped < 1.0, "B did not honour A's trip in 1 s"
                await trio.sleep(0.02)
            seen = len(west.requests)
            for _ in range(10):
                r = await b.client.post(
                    "/v1/chat/completions", json=body, headers=b.auth(key["key"])
                )
                assert r.status_code == 200 and r.headers["x-gateway-attempts"] == "1"
            assert len(west.requests) == seen  # B never tried it
        nursery.cancel_scope.cancel()
