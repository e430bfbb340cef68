"""Active health checks end to end in one gateway (real sockets, real time with short
intervals; the actor's rounds under a MockClock are tests/actors/test_health_check.py): a
health-checked deployment that starts failing is announced by one signed `endpoint.unhealthy`
webhook and leaves the rotation (chat requests no longer reach it), comes back after
`healthy_after` successes with one `endpoint.recovered`; the checks are billed to no one; the
admin view shows the checker and the health."""

from __future__ import annotations

import base64
import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from bench.upstream import UpstreamServer, serve_upstream
from tests.actors.webhooks.support import verify
from tests.gateway.routing.rig import Routed, deployments_toml, routed_rig
from tests.harness import OPERATOR_KEY, Gateway, gateway_config, running_gateway
from tests.inference import inference_toml, ledger
from tests.waiting import wait_until, wait_until_async
from tests.webhook_receiver import Receiver, ReceiverTLS, make_tls, serve_receiver

MODEL = """
[webhooks]
allowed_private_networks = ["127.0.0.0/8"]
poll_interval_s = 0.05

[[models]]
id = "ha"
strategy = "weighted"
input_usd_per_mtok = 1
output_usd_per_mtok = 2

[[models.deployments]]
provider = "east"
upstream = "sim-a"
health_check = { interval_s = 0.1, timeout_s = 1.0, unhealthy_after = 2, healthy_after = 2 }

[[models.deployments]]
provider = "west"
upstream = "sim-b"
"""
TYPES = ["endpoint.unhealthy", "endpoint.recovered"]


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ReceiverTLS:
    """A trustme CA the gateway's outbound TLS trusts (its sender reads SSL_CERT_FILE)."""
    made = make_tls()
    path = tmp_path / "ca.pem"
    path.write_bytes(made.ca_pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(path))
    return made


def chats_to(upstream: UpstreamServer) -> int:
    """Chat requests a provider received from clients (not the 1-token "ping" checks)."""
    return sum(1 for r in upstream.requests if r.body and b'"ping"' not in r.body)


def pings_to(upstream: UpstreamServer) -> int:
    return sum(1 for r in upstream.requests if r.body and b'"ping"' in r.body)


async def served_by(routed: Routed, count: int) -> set[str]:
    served = set()
    for _ in range(count):
        r = await routed.chat()
        assert r.status_code == 200, r.text
        served.add(r.headers["x-gateway-deployment"])
    return served


async def test_unhealthy_then_recovered_one_signed_event_each_out_of_rotation_not_billed(
    database_url: str, tmp_path: Path, tls: ReceiverTLS
) -> None:
    async with trio.open_nursery() as nursery:
        receiver: Receiver = await nursery.start(partial(serve_receiver, tls=tls.server))
        async with routed_rig(database_url, tmp_path / "gw", MODEL) as routed:
            await _scenario(routed, receiver)
        nursery.cancel_scope.cancel()


async def _scenario(routed: Routed, receiver: Receiver) -> None:
    gw = routed.rig.gateway
    r = await gw.client.post(
        "/v1/webhooks", json={"url": receiver.url, "events": TYPES}, headers=gw.auth()
    )
    assert r.status_code == 200, r.text
    secret = r.json()["secret"]
    balance, usage = await ledger(routed.rig)

    routed.east.behavior.fail_status = 503
    with trio.fail_after(30):
        [arrival] = await receiver.wait_for(1)
    assert verify(secret, arrival)
    event = json.loads(arrival.body)
    assert event["type"] == "endpoint.unhealthy"
    data = event["data"]
    assert {k: v for k, v in data.items() if k != "since"} == {
        "model": "ha",
        "provider": "east",
        "upstream": "sim-a",
        "host": "127.0.0.1",
        "consecutive_failures": 2,
        "last_error": "status 503",
    }
    assert pings_to(routed.east) >= 3 and pings_to(routed.west) == 0
    assert await ledger(routed.rig) == (balance, usage)  # checks are billed to no one

    before = chats_to(routed.east)
    assert await served_by(routed, 6) == {"west/sim-b"}
    assert chats_to(routed.east) == before == 0  # out of rotation: not even tried
    await _admin_shows(routed, healthy=False)

    routed.east.behavior.fail_status = None
    with trio.fail_after(30):
        arrivals = await receiver.wait_for(2)
    recovered = json.loads(arrivals[1].body)
    assert verify(secret, arrivals[1]) and recovered["type"] == "endpoint.recovered"
    assert recovered["data"]["consecutive_successes"] == 2
    assert recovered["data"]["unhealthy_since"] == data["since"]
    assert await served_by(routed, 6) == {"east/sim-a", "west/sim-b"}  # back in rotation
    await _admin_shows(routed, healthy=True)

    seen = pings_to(routed.east)
    await wait_until(lambda: pings_to(routed.east) >= seen + 3)  # a few more rounds
    written = await gw.runtime.storage.db.fetch(
        "SELECT type FROM events WHERE type LIKE 'endpoint.%' ORDER BY seq"
    )
    assert [row["type"] for row in written] == TYPES  # once each
    assert len(receiver.arrivals) == 2


async def _admin_shows(routed: Routed, *, healthy: bool) -> None:
    gw = routed.rig.gateway
    tree: Any = (await gw.client.get("/v1/admin/actors", headers=gw.auth(OPERATOR_KEY))).json()
    [checker] = [n for n in tree["children"] if n["name"] == "health-check:ha:east/sim-a"]
    assert checker["statistics"]["healthy"] is healthy and checker["statistics"]["checking"]
    [east, west] = tree["services"]["deployments"]["ha"]["deployments"]
    assert (east["healthy"], east["health_checked"]) == (healthy, True)
    assert (west["healthy"], west["health_checked"]) == (True, False)
    metrics = (await gw.client.get("/metrics")).text
    gauge = 'gateway_deployment_healthy{model="ha",deployment="east/sim-a"}'
    assert f"{gauge} {1.0 if healthy else 0.0}" in metrics


async def test_two_instances_on_one_database_one_checks(database_url: str, tmp_path: Path) -> None:
    """Both run the actor; only the lease holder sends checks, and both follow the health."""
    async with trio.open_nursery() as nursery:
        east: UpstreamServer = await nursery.start(serve_upstream)
        west: UpstreamServer = await nursery.start(serve_upstream)
        model = MODEL.replace("unhealthy_after = 2", "unhealthy_after = 3")
        toml = inference_toml(east.url) + deployments_toml(east.url, west.url, model)
        config_a = gateway_config(database_url, tmp_path / "a", toml=toml)
        assert config_a.master_key is not None
        key = base64.b64encode(config_a.master_key).decode()
        config_b = gateway_config(database_url, tmp_path / "b", toml=toml, GATEWAY_MASTER_KEY=key)
        async with running_gateway(config_a) as a, running_gateway(config_b) as b:
            await wait_until(lambda: pings_to(east) >= 10)
            first, second = await _checker(a), await _checker(b)
            assert (first["checking"], second["checking"]) == (True, False)
            assert second["checks"] == 0 and first["checks"] >= 10
            assert first["checks"] - 1 <= pings_to(east) <= first["checks"]  # one in flight

            east.behavior.fail_status = 503
            await wait_until_async(partial(_unhealthy_on, b))  # the other instance follows
            assert (await _checker(b))["checks"] == 0
        nursery.cancel_scope.cancel()


async def _checker(gw: Gateway) -> dict[str, Any]:
    tree: Any = (await gw.client.get("/v1/admin/actors", headers=gw.auth(OPERATOR_KEY))).json()
    [checker] = [n for n in tree["children"] if n["name"] == "health-check:ha:east/sim-a"]
    statistics: dict[str, Any] = checker["statistics"]
    return statistics


async def _unhealthy_on(gw: Gateway) -> bool:
    return (await _checker(gw))["healthy"] is False
