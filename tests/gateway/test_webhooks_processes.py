"""Webhook delivery across real `gateway serve` processes, over HTTPS to a receiver trusting a
trustme CA (the processes get it through SSL_CERT_FILE, as an operator would):

- `kill -9` of the process while a delivery is in flight and more events wait: after a restart
  every event arrives, at least once, in order, with the same id and body bytes;
- two processes sharing the database (and Redis when configured) produce events for one
  subscription: each event arrives once, in creation order; killing the owner moves the queue
  to the other process, which goes on in order.

Runs on SQLite (processes share the file) and on PostgreSQL.
"""

from __future__ import annotations

import base64
import json
import os
import signal
from functools import partial
from pathlib import Path

import httpx
import trio

from tests.backends import REDIS_URL
from tests.gateway.test_cli import BOOTSTRAP, _env, _gateway, _start, _stop
from tests.webhook_receiver import HANG, Receiver, ReceiverTLS, make_tls, serve_receiver

MGMT = {"Authorization": f"Bearer {BOOTSTRAP}"}
OPERATOR_KEY = "service_op_webhooks-processes-operator-0123"
OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}
LEASE_TTL_S = 2

CONFIG = f"""
[webhooks]
allowed_private_networks = ["127.0.0.0/8"]
poll_interval_s = 0.1
lease_ttl_s = {LEASE_TTL_S}
"""


class Cluster:
    """`gateway serve` processes sharing one database, master key and config."""

    def __init__(self, tmp_path: Path, database_url: str, tls: ReceiverTLS) -> None:
        self.tmp_path = tmp_path
        ca = tmp_path / "ca.pem"
        ca.write_bytes(tls.ca_pem)
        config = tmp_path / "gateway.toml"
        config.write_text(CONFIG)
        self.env = {
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
            "GATEWAY_CONFIG": str(config),
            "GATEWAY_LOG_LEVEL": "WARNING",
            "GATEWAY_OPERATOR_KEY": OPERATOR_KEY,
            "SSL_CERT_FILE": str(ca),
        }
        if REDIS_URL is not None:
            self.env["GATEWAY_REDIS_URL"] = REDIS_URL
        self.started = 0

    async def start(self) -> tuple[trio.Process, str]:
        self.started += 1
        home = self.tmp_path / f"p{self.started}"
        home.mkdir()
        return await _start(_gateway("serve"), _env(home, **self.env), home)


async def subscribe(client: httpx.AsyncClient, url: str) -> dict[str, object]:
    r = await client.post(
        "/v1/webhooks", json={"url": url, "events": ["key.created"]}, headers=MGMT
    )
    assert r.status_code == 200, r.text
    created: dict[str, object] = r.json()
    return created


async def create_key(client: httpx.AsyncClient, name: str) -> str:
    r = await client.post("/v1/keys", json={"name": name}, headers=MGMT)
    assert r.status_code == 200, r.text
    key_id: str = r.json()["id"]
    return key_id


def delivered_keys(receiver: Receiver) -> list[tuple[str, str]]:
    """(event id, key id) of each arrival, in arrival order, duplicates kept."""
    out = []
    for arrival in receiver.arrivals:
        envelope = json.loads(arrival.body)
        assert arrival.header("Service-Webhook-Id") == envelope["id"]
        out.append((envelope["id"], envelope["data"]["key_id"]))
    return out


def first_occurrences(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Deduplicated by event id, as a receiver does: each event where it first arrived."""
    seen: set[str] = set()
    out = []
    for event, key in pairs:
        if event not in seen:
            seen.add(event)
            out.append((event, key))
    return out


async def arrivals(receiver: Receiver, count: int, seconds: float = 30) -> None:
    with trio.fail_after(seconds):
        await receiver.wait_for(count)


async def owner_of(client: httpx.AsyncClient, webhook_id: str) -> bool:
    """Whether this process delivers the subscription (its actor is in the tree)."""
    tree = (await client.get("/v1/admin/actors", headers=OPERATOR)).json()
    stack = [tree]
    while stack:
        node = stack.pop()
        if node["name"] == f"webhook:{webhook_id}":
            return True
        stack.extend(node["children"])
    return False


async def settled(
    client: httpx.AsyncClient, webhook_id: str, count: int, headers: dict[str, str] = MGMT
) -> None:
    """Until the subscription's log holds `count` deliveries, every one delivered: nothing is
    pending, so nothing more can be sent (what was sent twice has arrived by then)."""
    with trio.fail_after(30):
        while True:
            r = await client.get(f"/v1/webhooks/{webhook_id}/deliveries?limit=100", headers=headers)
            statuses = [d["status"] for d in r.json()["data"]]
            if len(statuses) == count and set(statuses) == {"delivered"}:
                return
            await trio.sleep(0.05)


def kill_9(process: trio.Process) -> None:
    process.send_signal(signal.SIGKILL)


async def test_kill_9_mid_delivery_then_restart_delivers_every_event_in_order(
    database_url: str, tmp_path: Path
) -> None:
    tls = make_tls()
    cluster = Cluster(tmp_path, database_url, tls)
    async with trio.open_nursery() as nursery:
        receiver: Receiver = await nursery.start(partial(serve_receiver, tls=tls.server))
        receiver.play(HANG)  # the first attempt is in flight when the process dies
        process, url = await cluster.start()
        try:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                await subscribe(client, receiver.url)
                keys = [await create_key(client, f"k{i}") for i in range(5)]
                await arrivals(receiver, 1)
        finally:
            kill_9(process)
            await process.wait()
        assert len(receiver.arrivals) == 1  # strictly one at a time: the rest wait behind it
        in_flight = receiver.arrivals[0]

        process, url = await cluster.start()  # takes the queue once the dead lease expires
        try:
            await arrivals(receiver, 6)  # the one in flight again, then the four behind it
        finally:
            await _stop(process)
        nursery.cancel_scope.cancel()

    pairs = delivered_keys(receiver)
    assert [key for _, key in first_occurrences(pairs)] == keys
    assert [key for _, key in pairs] == [keys[0], *keys]  # the one in flight, then all in order
    again = receiver.arrivals[1]
    assert again.header("Service-Webhook-Id") == in_flight.header("Service-Webhook-Id")
    assert again.body == in_flight.body  # the same envelope bytes


async def test_two_processes_deliver_each_event_once_in_order_and_survive_the_owner(
    database_url: str, tmp_path: Path
) -> None:
    tls = make_tls()
    cluster = Cluster(tmp_path, database_url, tls)
    async with trio.open_nursery() as nursery:
        receiver: Receiver = await nursery.start(partial(serve_receiver, tls=tls.server))
        (a, url_a), (b, url_b) = await cluster.start(), await cluster.start()
        processes = [a, b]
        try:
            async with (
                httpx.AsyncClient(base_url=url_a, timeout=30) as client_a,
                httpx.AsyncClient(base_url=url_b, timeout=30) as client_b,
            ):
                clients = [client_a, client_b]
                webhook = await subscribe(client_a, receiver.url)
                webhook_id = str(webhook["id"])
                # Created alternately through both processes; each waits for the last.
                keys = [await create_key(clients[i % 2], f"k{i}") for i in range(10)]
                await arrivals(receiver, 10)
                await settled(client_a, webhook_id, 10)
                assert [key for _, key in delivered_keys(receiver)] == keys

                owners = [await owner_of(c, webhook_id) for c in clients]
                assert sorted(owners) == [False, True], owners
                dead = owners.index(True)
                kill_9(processes[dead])
                await processes[dead].wait()
                survivor = clients[1 - dead]
                more = [await create_key(survivor, f"m{i}") for i in range(5)]
                began = trio.current_time()
                await arrivals(receiver, 15)
                await settled(survivor, webhook_id, 15)
                # The dead owner's lease runs out, then the survivor's next poll takes it.
                assert trio.current_time() - began < LEASE_TTL_S + 5
                assert await owner_of(survivor, webhook_id)
        finally:
            for process in processes:
                if process.returncode is None:
                    await _stop(process)
        nursery.cancel_scope.cancel()

    pairs = delivered_keys(receiver)
    assert len({event for event, _ in pairs}) == len(pairs) == 15  # each once
    assert [key for _, key in pairs] == keys + more
