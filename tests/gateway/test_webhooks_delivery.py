"""Webhooks end to end in one gateway over real HTTPS (a trustme CA, trusted through
SSL_CERT_FILE as an operator would): events produced concurrently arrive at each subscription
once, in outbox order, two subscriptions served side by side; a chat request that fails
upstream arrives as one `completion.error`; /metrics shows the deliveries and the queues."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.gateway.test_webhooks_processes import settled
from tests.harness import OPERATOR_KEY
from tests.inference import Rig, inference_rig
from tests.metrics_lint import lint, value
from tests.waiting import wait_until_async
from tests.webhook_receiver import Receiver, ReceiverTLS, make_tls, serve_receiver

TOML = """
[webhooks]
allowed_private_networks = ["127.0.0.0/8"]
poll_interval_s = 0.05
"""


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ReceiverTLS:
    """A trustme CA the gateway's outbound TLS trusts (its sender reads SSL_CERT_FILE)."""
    made = make_tls()
    path = tmp_path / "ca.pem"
    path.write_bytes(made.ca_pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(path))
    return made


def envelopes(receiver: Receiver) -> list[dict[str, Any]]:
    return [json.loads(a.body) for a in receiver.arrivals]


async def test_concurrent_events_arrive_once_in_outbox_order_at_each_subscription(
    database_url: str, tmp_path: Path, tls: ReceiverTLS
) -> None:
    async with trio.open_nursery() as nursery:
        keys_hook: Receiver = await nursery.start(partial(serve_receiver, tls=tls.server))
        all_hook: Receiver = await nursery.start(partial(serve_receiver, tls=tls.server))
        async with inference_rig(database_url, tmp_path / "gw", extra_toml=TOML) as rig:
            await produce_and_check(rig, keys_hook, all_hook)
        nursery.cancel_scope.cancel()


async def produce_and_check(rig: Rig, keys_hook: Receiver, all_hook: Receiver) -> None:
    gw = rig.gateway
    hooks = []
    for receiver, events in ((keys_hook, ["key.created"]), (all_hook, ["*"])):
        r = await gw.client.post(
            "/v1/webhooks", json={"url": receiver.url, "events": events}, headers=gw.auth()
        )
        assert r.status_code == 200, r.text
        hooks.append(r.json()["id"])

    async def create(i: int) -> None:
        r = await gw.client.post("/v1/keys", json={"name": f"c{i}"}, headers=gw.auth())
        assert r.status_code == 200, r.text

    async with trio.open_nursery() as producers:  # 30 key changes at once
        for i in range(30):
            producers.start_soon(create, i)
    failed = await rig.chat({"model": "gone", "messages": [{"role": "user", "content": "x"}]})
    assert failed.status_code == 502

    with trio.fail_after(30):
        await keys_hook.wait_for(30)
        await gw.runtime.event_writer.flush()  # the completion.error is written in a batch
        await all_hook.wait_for(31)
    await settled(gw.client, hooks[0], 30, gw.auth())  # nothing pending: no more will come
    await settled(gw.client, hooks[1], 31, gw.auth())

    rows = await gw.runtime.storage.db.fetch(  # the outbox order: docs/decisions.md
        "SELECT id FROM events WHERE org_id = :org AND type = 'key.created' ORDER BY txid, seq",
        {"org": gw.org_id},
    )
    # The rig's own key was created before the subscriptions: not theirs.
    order = [row["id"] for row in rows][-30:]
    assert [e["id"] for e in envelopes(keys_hook)] == order  # each once, in the outbox order
    everything = envelopes(all_hook)
    assert [e["id"] for e in everything if e["type"] == "key.created"] == order
    [error] = [e for e in everything if e["type"] == "completion.error"]
    assert error["data"]["status"] == 502 and error["data"]["model"] == "dead/gone"
    assert error["data"]["request_id"] == failed.headers["x-request-id"]
    assert len(everything) == 31

    # A delivery is counted just after its attempt is recorded, which the log above shows
    # first: wait for the count rather than read it once.
    async def counted() -> bool:
        metrics = (await gw.client.get("/metrics")).text
        return 'gateway_webhook_deliveries_total{outcome="delivered"} 61' in metrics

    await wait_until_async(counted)
    deliveries = lint((await gw.client.get("/metrics")).text)["gateway_webhook_deliveries"]
    assert deliveries.type == "counter"
    assert value(deliveries, "gateway_webhook_deliveries_total", outcome="dropped") == 0
    assert value(deliveries, "gateway_webhook_deliveries_total", outcome="delivered") == 61
    tree = (await gw.client.get("/v1/admin/actors", headers=gw.auth(OPERATOR_KEY))).json()
    [webhooks] = [n for n in tree["children"] if n["name"] == "webhooks"]
    assert len([c for c in webhooks["children"] if c["name"].startswith("webhook:")]) == 2


async def test_metrics_show_a_held_queue_and_its_age(
    database_url: str, tmp_path: Path, tls: ReceiverTLS
) -> None:
    """A receiver that cannot be reached holds the queue: its depth and age per subscription,
    the retry counted, the error in the delivery log."""
    with trio.socket.socket() as probe:  # a port nothing listens on: connection refused
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with inference_rig(database_url, tmp_path / "gw", extra_toml=TOML) as rig:
        gw = rig.gateway
        url = f"https://127.0.0.1:{port}/hook"
        r = await gw.client.post(
            "/v1/webhooks", json={"url": url, "events": ["key.created"]}, headers=gw.auth()
        )
        webhook_id = r.json()["id"]
        for i in range(3):
            await gw.client.post("/v1/keys", json={"name": f"q{i}"}, headers=gw.auth())
        depth = f'gateway_webhook_queue_depth{{webhook_id="{webhook_id}"}} '
        age = f'gateway_webhook_oldest_pending_seconds{{webhook_id="{webhook_id}"}} '
        with trio.fail_after(30):  # queue statistics are refreshed every 5 s
            while True:
                lines = (await gw.client.get("/metrics")).text.splitlines()
                if 'gateway_webhook_deliveries_total{outcome="retry"} 1' in lines and any(
                    line.startswith(depth) for line in lines
                ):
                    break
                await trio.sleep(0.1)
        [shown] = [line for line in lines if line.startswith(depth)]
        assert float(shown.rsplit(" ", 1)[1]) >= 1
        [oldest] = [line for line in lines if line.startswith(age)]
        assert float(oldest.rsplit(" ", 1)[1]) >= 0
        log = await gw.client.get(f"/v1/webhooks/{webhook_id}/deliveries", headers=gw.auth())
        [held] = [d for d in log.json()["data"] if d["attempts"] == 1]
        assert held["status"] == "pending" and held["last_error"] == "connection refused"
        assert held["next_attempt_at"] is not None
