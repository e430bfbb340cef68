"""The Responses API routes like chat: a model of several deployments is retried on another
when one fails (before the first byte of a stream), and the answer names its deployment."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gateway.routing.rig import routed_rig
from tests.gateway.routing.test_retries import TWO


@pytest.mark.parametrize("stream", [False, True])
async def test_a_response_is_retried_on_another_deployment(
    database_url: str, tmp_path: Path, stream: bool
) -> None:
    async with routed_rig(database_url, tmp_path, TWO.format(extra="")) as routed:
        routed.west.behavior.fail_status = 502
        gw = routed.rig.gateway
        for _ in range(4):  # weighted 1:1: some of them try west first
            r = await gw.client.post(
                "/v1/responses",
                json={"model": "ha", "input": "hello", "stream": stream},
                headers=gw.auth(routed.rig.key),
            )
            assert r.status_code == 200, r.text
            assert r.headers["x-gateway-deployment"] == "east/sim-a"
            if stream:
                assert "response.completed" in r.text
            else:
                assert r.json()["model"] == "ha" and r.json()["status"] == "completed"
        assert 2 <= len(routed.west.requests) <= 3  # until its breaker trips (3 failures)
