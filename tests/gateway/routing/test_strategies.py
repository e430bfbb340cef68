"""Strategies through a running gateway, over real sockets: `priority` keeps tier 2 idle while
tier 1 serves, `latency` prefers the faster deployment after warm-up (the balancer's own tests,
tests/services/test_routing_balancer.py, check the exact shares)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.gateway.routing.rig import routed_rig

MODEL = """
[[models]]
id = "ha"
strategy = "{strategy}"
input_usd_per_mtok = 1
output_usd_per_mtok = 2

[[models.deployments]]
provider = "east"
upstream = "sim-a"
priority = 0

[[models.deployments]]
provider = "west"
upstream = "sim-b"
priority = {west_priority}
"""


async def test_priority_never_touches_tier_two_while_tier_one_serves(
    database_url: str, tmp_path: Path
) -> None:
    model = MODEL.format(strategy="priority", west_priority=1)
    async with routed_rig(database_url, tmp_path, model) as routed:
        for _ in range(40):
            assert (await routed.chat()).status_code == 200
        assert routed.served() == (40, 0)
        routed.east.behavior.fail_status = 503  # tier one fails: tier two takes over
        for _ in range(5):
            r = await routed.chat()
            assert r.status_code == 200 and r.headers["x-gateway-deployment"] == "west/sim-b"


async def test_latency_prefers_the_faster_deployment_after_warm_up(
    database_url: str, tmp_path: Path
) -> None:
    model = MODEL.format(strategy="latency", west_priority=0)
    async with routed_rig(database_url, tmp_path, model) as routed:
        routed.west.behavior.latency_s = 0.03  # west answers 30 ms later
        for _ in range(10):  # warm-up: both measured
            assert (await routed.chat()).status_code == 200
        seen = Counter()
        for _ in range(100):
            r = await routed.chat()
            seen[r.headers["x-gateway-deployment"]] += 1
        assert seen["east/sim-a"] >= 90


async def test_a_deployment_over_its_own_tpm_rests_until_the_next_minute(
    database_url: str, tmp_path: Path
) -> None:
    model = MODEL.format(strategy="priority", west_priority=1).replace(
        'upstream = "sim-a"', 'upstream = "sim-a"\ntpm = 40'
    )
    async with routed_rig(database_url, tmp_path, model) as routed:
        served = []
        for _ in range(4):  # each request is 24 tokens (4 in, 20 out): east is past 40 after two
            r = await routed.chat()
            served.append(r.headers["x-gateway-deployment"])
        assert served[:2] == ["east/sim-a"] * 2 and served[2:] == ["west/sim-b"] * 2
