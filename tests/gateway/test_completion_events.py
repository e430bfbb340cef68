"""`completion.error` and `completion.success` events over real HTTP, on both backends: one
error event per failed inference request after authentication (upstream failures, 400s, client
disconnects), none for an unauthenticated 401, successes sampled at 1.0 and 0, and many
requests written in few transactions."""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from storage.events import Event
from tests.inference import Rig, inference_rig, open_raw_stream
from tests.waiting import wait_until, wait_until_async

MESSAGES = [{"role": "user", "content": "hi"}]
BODY = {"model": "small", "messages": MESSAGES, "max_tokens": 5}


def sampled(rate: float) -> str:
    return f"\n[webhooks]\ncompletion_success_sample_rate = {rate}\n"


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path, read_timeout_s=0.5) as r:
        yield r


async def completion_events(rig: Rig, type: str | None = None) -> list[Event]:
    """The org's completion.* events, once everything offered so far is written: billed
    requests' events with their charges (the accountant's flush), others by the event writer."""
    await rig.gateway.runtime.accountant.flush()
    await rig.gateway.runtime.event_writer.flush()
    stored = await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id, limit=10_000)
    kinds = (type,) if type else ("completion.error", "completion.success")
    return [e for e in stored if e.type in kinds]


async def key_id_of(rig: Rig) -> str:
    r = await rig.gateway.client.get("/v1/keys", headers=rig.gateway.auth())
    (key,) = [k for k in r.json()["data"] if k["name"] == "all"]
    return str(key["id"])


def assert_error_event(
    data: dict[str, Any], response: Any, *, key_id: str, model: str | None, endpoint: str
) -> None:
    answered = response.json()["error"]
    assert data["request_id"] == response.headers["x-request-id"]
    assert data["key_id"] == key_id
    assert data["model"] == model
    assert data["endpoint"] == endpoint
    assert data["status"] == response.status_code
    assert data["error"] == {k: answered[k] for k in ("type", "code", "message")}
    assert isinstance(data["latency_ms"], float) and data["latency_ms"] >= 0
    assert set(data) == {
        "request_id",
        "key_id",
        "model",
        "endpoint",
        "status",
        "error",
        "latency_ms",
    }


@pytest.mark.parametrize("stream", [False, True])
async def test_an_upstream_500_is_one_error_event(rig: Rig, stream: bool) -> None:
    rig.upstream.behavior.fail_status = 500
    r = await rig.chat({**BODY, "stream": stream})
    assert r.status_code == 502
    (event,) = await completion_events(rig)
    assert event.type == "completion.error"
    key_id = await key_id_of(rig)
    assert_error_event(
        event.data, r, key_id=key_id, model="sim/sim-small", endpoint="/v1/chat/completions"
    )
    assert event.data["error"]["code"] == "upstream_error"


async def test_an_unreachable_upstream_is_one_error_event(rig: Rig) -> None:
    r = await rig.chat({"model": "gone", "messages": MESSAGES})
    assert r.status_code == 502
    (event,) = await completion_events(rig, "completion.error")
    assert event.data["error"]["code"] == "upstream_unavailable"
    assert event.data["model"] == "dead/gone" and event.data["status"] == 502


async def test_a_400_after_authentication_is_one_error_event(rig: Rig) -> None:
    r = await rig.chat({"messages": MESSAGES})  # no model
    assert r.status_code == 400
    (event,) = await completion_events(rig)
    assert event.type == "completion.error"
    key_id = await key_id_of(rig)
    assert_error_event(event.data, r, key_id=key_id, model=None, endpoint="/v1/chat/completions")


async def test_an_embeddings_error_names_its_endpoint(rig: Rig) -> None:
    r = await rig.gateway.client.post(
        "/v1/embeddings", json={"model": "embed", "input": ""}, headers=rig.gateway.auth(rig.key)
    )
    assert r.status_code == 400
    (event,) = await completion_events(rig)
    assert event.data["endpoint"] == "/v1/embeddings" and event.data["status"] == 400


async def test_an_unauthenticated_401_is_no_event(rig: Rig) -> None:
    r = await rig.chat(BODY, key="service_sk_live_nosuchkey0000000000000000")
    assert r.status_code == 401
    r = await rig.gateway.client.post("/v1/chat/completions", json=BODY)
    assert r.status_code == 401
    assert await completion_events(rig) == []


async def test_other_routes_are_no_events(rig: Rig) -> None:
    r = await rig.gateway.client.get("/v1/keys/key_nope", headers=rig.gateway.auth())
    assert r.status_code == 404
    r = await rig.gateway.client.get("/v1/models/nope", headers=rig.gateway.auth(rig.key))
    assert r.status_code == 404
    assert await completion_events(rig) == []


async def test_the_default_rate_samples_no_successes_of_few(rig: Rig) -> None:
    """Default 0.1: not every success is an event (20 requests all sampled: 1e-20)."""
    for _ in range(20):
        assert (await rig.chat(BODY)).status_code == 200
    assert len(await completion_events(rig, "completion.success")) < 20


async def test_a_client_that_leaves_is_one_499_error_event(rig: Rig) -> None:
    rig.upstream.behavior.chunk_interval_s = 0.05
    rig.upstream.behavior.completion_tokens = 1000
    stream = await open_raw_stream(rig, {**BODY, "stream": True, "max_tokens": 1000}, frames=3)
    await stream.aclose()

    async def written() -> bool:
        return bool(await completion_events(rig))

    await wait_until_async(written)  # the request ends after the client left
    (event,) = await completion_events(rig)
    assert event.type == "completion.error"
    assert event.data["status"] == 499
    assert event.data["error"]["code"] == "client_disconnected"
    assert event.data["model"] == "sim/sim-small"


async def test_a_client_that_resets_mid_stream_is_a_499_not_an_unhandled_error(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """A reset (RST, not FIN) makes the gateway's next write fail: that is the client leaving,
    logged 499 with `client_disconnected`, never a server error."""
    rig.upstream.behavior.chunk_interval_s = 0.05
    rig.upstream.behavior.completion_tokens = 1000
    stream = await open_raw_stream(rig, {**BODY, "stream": True, "max_tokens": 1000}, frames=3)
    linger = struct.pack("ii", 1, 0)  # on: close sends RST at once
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
    await stream.aclose()

    async def written() -> bool:
        return bool(await completion_events(rig))

    await wait_until_async(written)
    (event,) = await completion_events(rig)
    assert (event.type, event.data["status"]) == ("completion.error", 499)
    assert event.data["error"]["code"] == "client_disconnected"
    assert event.data["error"]["type"] == "client_error"
    unhandled = [r for r in caplog.records if "unhandled" in r.getMessage()]
    assert unhandled == []


async def test_sampling_1_is_one_success_event_per_request(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=sampled(1.0)) as rig:
        responses = [await rig.chat(BODY) for _ in range(3)]
        streamed = await rig.chat({**BODY, "stream": True})
        embedded = await rig.gateway.client.post(
            "/v1/embeddings",
            json={"model": "embed", "input": "hello"},
            headers=rig.gateway.auth(rig.key),
        )
        assert embedded.status_code == 200
        events = await completion_events(rig)
        key_id = await key_id_of(rig)
    assert [e.type for e in events] == ["completion.success"] * 5
    for event, r in zip(events, [*responses, streamed, embedded], strict=True):
        assert event.data["request_id"] == r.headers["x-request-id"]
        assert event.data["key_id"] == key_id and event.data["status"] == 200
    first = events[0].data
    usage = responses[0].json()["usage"]
    assert first["model"] == "sim/sim-small" and first["endpoint"] == "/v1/chat/completions"
    assert first["stream"] is False and events[3].data["stream"] is True
    assert first["usage"] == {k: usage[k] for k in ("prompt_tokens", "completion_tokens")} | {
        "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]
    }
    assert first["cost_usd"] > 0 and first["latency_ms"] >= 0
    assert events[4].data["endpoint"] == "/v1/embeddings"


async def test_sampling_0_is_no_success_event(database_url: str, tmp_path: Path) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=sampled(0)) as rig:
        for _ in range(5):
            assert (await rig.chat(BODY)).status_code == 200
        rig.upstream.behavior.fail_status = 500
        assert (await rig.chat(BODY)).status_code == 502  # errors are never sampled
        events = await completion_events(rig)
    assert [e.type for e in events] == ["completion.error"]


async def test_many_requests_are_written_in_few_transactions(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=sampled(1.0)) as rig:
        writer = rig.gateway.runtime.event_writer
        accountant = rig.gateway.runtime.accountant  # billed requests' events: with the usage
        before = writer.stats.flushes + accountant.stats.flushes

        async def one() -> None:
            assert (await rig.chat(BODY)).status_code == 200

        async with trio.open_nursery() as nursery:
            for _ in range(100):
                nursery.start_soon(one)
        events = rig.gateway.runtime.storage.events

        async def all_written() -> bool:  # by the actors' own flushes, none asked for here
            stored = await events.list_for_org(rig.gateway.org_id, limit=10_000)
            return sum(e.type == "completion.success" for e in stored) >= 100

        await wait_until_async(all_written)
        flushes = writer.stats.flushes + accountant.stats.flushes - before
        found = await completion_events(rig, "completion.success")
    assert len(found) == 100
    assert flushes < 25, flushes  # one commit per request would be 100
    assert writer.stats.dropped == 0


async def test_a_billed_requests_event_is_written_with_its_usage_row(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=sampled(1.0)) as rig:
        runtime = rig.gateway.runtime
        r = await rig.chat(BODY)
        assert r.status_code == 200
        await wait_until(lambda: runtime.accountant.statistics()["awaiting_request_end"] == 0)
        await runtime.accountant.flush()  # the usage flush alone, not the event writer's
        stored = await runtime.storage.events.list_for_org(rig.gateway.org_id)
        rows, _ = await runtime.storage.ledger.list(
            rig.gateway.org_id, type="usage", limit=10, offset=0
        )
    assert runtime.event_writer.stats.offered == 0
    (event,) = [e for e in stored if e.type == "completion.success"]
    assert event.data["request_id"] == r.headers["x-request-id"]
    assert [row.request_id for row in rows] == [r.headers["x-request-id"]]
