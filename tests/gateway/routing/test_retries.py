"""Retries on another deployment (gateway/inference/routing.py), over real sockets: a failing
deployment is routed around (and rests), the client's own errors are never retried, attempts
stay within `max_attempts` and `retry_budget_s`, the answer names its deployment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.gateway.keys_client import error_of
from tests.gateway.routing.rig import Routed, routed_rig
from tests.harness import OPERATOR_KEY
from tests.inference import chunks, ledger
from tests.waiting import wait_until_async

TWO = """
[[models]]
id = "ha"
strategy = "weighted"
input_usd_per_mtok = 1
output_usd_per_mtok = 2
{extra}

[[models.deployments]]
provider = "east"
upstream = "sim-a"

[[models.deployments]]
provider = "west"
upstream = "sim-b"
"""


@pytest.fixture
async def routed(database_url: str, tmp_path: Path) -> AsyncIterator[Routed]:
    async with routed_rig(database_url, tmp_path, TWO.format(extra="")) as r:
        yield r


async def test_every_request_succeeds_while_one_deployment_fails(routed: Routed) -> None:
    routed.west.behavior.fail_status = 500
    answers = []
    limit = trio.CapacityLimiter(50)

    async def one(stream: bool) -> None:
        async with limit:
            answers.append(await routed.chat(stream=stream))

    async with trio.open_nursery() as nursery:
        for i in range(1000):  # JSON and SSE, 50 at a time
            nursery.start_soon(one, i % 2 == 1)
    assert [r.status_code for r in answers] == [200] * 1000
    assert {r.headers["x-gateway-deployment"] for r in answers} == {"east/sim-a"}
    for r in answers:
        if r.headers["content-type"].startswith("text/event-stream"):
            assert r.text.endswith("data: [DONE]\n\n") and chunks(r.text)[0]["model"] == "ha"
        else:
            assert r.json()["model"] == "ha"
    # The failing deployment tripped after 3 failures and rests 30 s: only the requests sent
    # before that (concurrently) reached it, and none after.
    tripped = len(routed.west.requests)
    assert 3 <= tripped <= 50
    for _ in range(20):
        assert (await routed.chat()).headers["x-gateway-attempts"] == "1"
    assert len(routed.west.requests) == tripped


async def test_a_retried_answer_names_its_deployment_and_attempts(routed: Routed) -> None:
    routed.west.behavior.fail_status = 503
    names = []
    for _ in range(2):  # weighted 1:1: one of the two goes to west first
        r = await routed.chat()
        assert r.status_code == 200
        names.append((r.headers["x-gateway-deployment"], r.headers["x-gateway-attempts"]))
    assert sorted(names) == [("east/sim-a", "1"), ("east/sim-a", "2")]


async def test_the_clients_own_error_is_never_retried(routed: Routed) -> None:
    for upstream in (routed.east, routed.west):
        upstream.behavior.fail_status = 400
    r = await routed.chat()
    assert r.status_code == 400
    assert sum(routed.served()) == 1  # one attempt only
    assert r.headers["x-gateway-attempts"] == "1"


async def test_attempts_never_exceed_max_attempts(routed: Routed) -> None:
    for upstream in (routed.east, routed.west):
        upstream.behavior.fail_status = 500
    r = await routed.chat()
    assert r.status_code == 502 and error_of(r)["type"] == "upstream_error"
    assert sum(routed.served()) == 3  # max_attempts (default 3): east, west, then again
    assert r.headers["x-gateway-attempts"] == "3"


async def test_a_request_with_an_idempotency_key_is_not_sent_twice(routed: Routed) -> None:
    for upstream in (routed.east, routed.west):
        upstream.behavior.fail_status = 500
    r = await routed.chat(metadata={"idempotency_key": "order-1"})
    assert r.status_code == 502
    assert sum(routed.served()) == 1


async def test_billing_charges_the_deployment_that_answered_at_its_price(
    database_url: str, tmp_path: Path
) -> None:
    model = TWO.format(extra="").replace(
        'upstream = "sim-b"',
        'upstream = "sim-b"\ninput_usd_per_mtok = 10\noutput_usd_per_mtok = 20',
    )
    async with routed_rig(database_url, tmp_path, model) as routed:
        routed.east.behavior.fail_status = 500  # west (ten times the price) answers
        r = await routed.chat()
        assert r.status_code == 200 and r.headers["x-gateway-deployment"] == "west/sim-b"
        usage = r.json()["usage"]
        _, rows = await ledger(routed.rig, settled=1)
        # (prompt x 10 + completion x 20) $/Mtok, plus the plan's fee, in micro-dollars
        provider_micros = usage["prompt_tokens"] * 10 + usage["completion_tokens"] * 20
        assert -rows[0].amount_micros >= provider_micros  # not the cheaper east price
        assert -rows[0].amount_micros < provider_micros * 2


async def test_no_attempt_starts_after_the_retry_budget(database_url: str, tmp_path: Path) -> None:
    model = TWO.format(extra="max_attempts = 10\nretry_budget_s = 0.8")
    async with routed_rig(database_url, tmp_path, model) as routed:
        for upstream in (routed.east, routed.west):
            upstream.behavior.hang = True  # each attempt waits its read timeout (0.5 s)
        began = trio.current_time()
        r = await routed.chat()
        assert r.status_code == 504
        assert sum(routed.served()) == 2  # the second started at ~0.55 s, a third would not
        assert trio.current_time() - began < 2.0


async def test_embeddings_are_retried_too(database_url: str, tmp_path: Path) -> None:
    async with routed_rig(database_url, tmp_path, TWO.format(extra="")) as routed:
        routed.west.behavior.fail_status = 502
        gw = routed.rig.gateway
        for _ in range(4):
            r = await gw.client.post(
                "/v1/embeddings",
                json={"model": "ha", "input": "hello"},
                headers=gw.auth(routed.rig.key),
            )
            assert r.status_code == 200 and r.json()["model"] == "ha"
            assert r.headers["x-gateway-deployment"] == "east/sim-a"


async def test_the_operator_sees_a_resting_deployment(routed: Routed) -> None:
    routed.west.behavior.fail_status = 500
    for _ in range(6):  # three of them fail on west, which trips
        assert (await routed.chat()).status_code == 200
    gw = routed.rig.gateway
    r = await gw.client.get("/v1/admin/actors", headers=gw.auth(OPERATOR_KEY))
    deployments = r.json()["services"]["deployments"]["ha"]
    assert deployments["strategy"] == "weighted"
    east, west = deployments["deployments"]
    assert (east["deployment"], east["state"], east["trips"]) == ("east/sim-a", "closed", 0)
    assert (west["deployment"], west["state"], west["trips"]) == ("west/sim-b", "open", 1)
    assert 29 < west["resting_s"] <= 30 and east["ttfb_ms"] > 0
    metrics = (await gw.client.get("/metrics")).text
    assert 'gateway_deployment_state{model="ha",deployment="west/sim-b"} 2' in metrics
    assert 'gateway_deployment_state{model="ha",deployment="east/sim-a"} 0' in metrics


async def test_a_rested_deployment_is_probed_back_into_rotation(
    database_url: str, tmp_path: Path
) -> None:
    model = TWO.format(extra="cooldown_s = 0.2")
    async with routed_rig(database_url, tmp_path, model) as routed:
        routed.west.behavior.fail_status = 500
        while len(routed.west.requests) < 3:  # three failures trip it
            tripped_at = trio.current_time()  # (during the request that made the third)
            assert (await routed.chat()).status_code == 200
        routed.west.behavior.fail_status = None  # it recovers while resting
        answered: list[str] = []

        async def probed() -> bool:
            r = await routed.chat()
            answered.append(r.headers["x-gateway-deployment"])
            return answered[-1] == "west/sim-b"

        await wait_until_async(probed)
        assert trio.current_time() - tripped_at >= 0.2  # not before its rest ended
        for _ in range(4):  # closed again: weighted 1:1 once more
            answered.append((await routed.chat()).headers["x-gateway-deployment"])
        assert answered[-4:].count("west/sim-b") == 2
