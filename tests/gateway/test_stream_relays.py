"""Stream relays over real HTTP with the bench upstream: each live stream is a child of the
`stream-relays` supervisor in `/v1/admin/actors` (kind `stream_relay`) while it runs, a client
that leaves cancels it and closes the upstream connection, and a client that does not read
does not make the gateway read the whole upstream stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.harness import OPERATOR_KEY
from tests.inference import Rig, inference_rig, open_raw_stream, send_raw_chat
from tests.waiting import wait_until

STREAM = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


async def relay_nodes(rig: Rig) -> list[dict[str, Any]]:
    gw = rig.gateway
    r = await gw.client.get("/v1/admin/actors", headers=gw.auth(OPERATOR_KEY))
    assert r.status_code == 200
    (relays,) = [c for c in r.json()["children"] if c["name"] == "stream-relays"]
    children: list[dict[str, Any]] = relays["children"]
    return children


async def test_a_live_stream_shows_in_the_tree_and_leaves_it_with_its_client(rig: Rig) -> None:
    rig.upstream.behavior.chunk_interval_s = 0.02
    rig.upstream.behavior.completion_tokens = 1000
    stream = await open_raw_stream(rig, STREAM, frames=3)
    (node,) = await relay_nodes(rig)
    assert node["kind"] == "stream_relay" and node["state"] == "running"
    stats = node["statistics"]
    assert stats["model"] == "sim/sim-small" and stats["provider"] == "sim"
    assert stats["chunks"] >= 1 and stats["bytes"] > 0 and stats["age_s"] >= 0
    with trio.fail_after(10):
        while True:  # the client reads on: the relay's bytes grow
            await stream.receive_some()
            (later,) = await relay_nodes(rig)
            if later["statistics"]["bytes"] > stats["bytes"]:
                break
    await stream.aclose()  # the client leaves mid-stream
    with trio.fail_after(10):
        await rig.upstream.wait_streams_idle()
    assert rig.upstream.statistics()["streams_client_closed"] == 1  # upstream closed
    await wait_until(lambda: rig.gateway.runtime.relays.statistics()["cancelled"] == 1)
    assert await relay_nodes(rig) == []
    r = await rig.gateway.client.get("/readyz")
    assert r.status_code == 200


async def test_a_finished_stream_leaves_the_tree(rig: Rig) -> None:
    r = await rig.chat({**STREAM, "max_tokens": 5})
    assert r.text.endswith("data: [DONE]\n\n")
    assert await relay_nodes(rig) == []
    assert rig.gateway.runtime.relays.statistics()["completed"] == 1


async def test_a_client_that_does_not_read_does_not_make_the_gateway_read_it_all(
    rig: Rig,
) -> None:
    """The upstream would send far more than socket buffers and the relay's channel hold; the
    client reads nothing. The relay stops reading (its channel is full), so what it relayed
    stays bounded and the upstream stream stays unfinished."""
    rig.upstream.behavior.completion_tokens = 100_000  # about 15 MB of frames
    stream = await send_raw_chat(rig, STREAM)
    seen: list[int] = []

    async def stalled() -> bool:
        nodes = await relay_nodes(rig)
        seen.append(nodes[0]["statistics"]["bytes"] if nodes else -1)
        return len(seen) >= 5 and seen[-1] == seen[-5] and seen[-1] > 0

    with trio.fail_after(20):
        while not await stalled():  # noqa: ASYNC110 - polling another process's progress
            await trio.sleep(0.05)
    assert seen[-1] < 8_000_000, seen  # 1.2 MB measured: socket buffers and the channel
    assert rig.upstream.statistics()["streams_completed"] == 0
    await stream.aclose()
    with trio.fail_after(10):
        await rig.upstream.wait_streams_idle()
    assert rig.upstream.statistics()["streams_client_closed"] == 1


async def test_the_upstream_pools_show_beside_the_tree(rig: Rig) -> None:
    """`Upstreams` is not an actor, so its numbers are a `services` section of the answer:
    per provider, requests and connections in use and idle (a live stream holds one)."""
    gw = rig.gateway

    async def upstreams() -> dict[str, Any]:
        r = await gw.client.get("/v1/admin/actors", headers=gw.auth(OPERATOR_KEY))
        assert r.status_code == 200
        pools: dict[str, Any] = r.json()["services"]["upstreams"]
        return pools

    before = (await upstreams())["sim"]
    assert before["connections_in_use"] == 0 and before["max_connections"] >= 1
    rig.upstream.behavior.chunk_interval_s = 0.02
    rig.upstream.behavior.completion_tokens = 1000
    stream = await open_raw_stream(rig, STREAM, frames=3)
    live = (await upstreams())["sim"]
    assert live["connections_in_use"] == 1 and live["requests"] == before["requests"] + 1
    await stream.aclose()
    await wait_until(lambda: gw.runtime.upstreams.get("sim").pool.in_use == 0)
    r = await rig.chat({"model": "small", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200
    after = (await upstreams())["sim"]
    assert after["connections_in_use"] == 0 and after["connections_idle"] >= 1  # kept alive
