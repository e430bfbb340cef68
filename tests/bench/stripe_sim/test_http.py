"""The simulated Stripe over raw HTTP: hostile requests answered 400 without harm, the
`/_sim/...` control routes, and `python -m bench.stripe` as its own process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from bench.stripe import StripeSim
from tests.bench.stripe_sim.support import KEY

ROOT = Path(__file__).resolve().parents[2]
AUTH = {"authorization": f"Bearer {KEY}"}
FORM = {**AUTH, "content-type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize(
    "body",
    [
        b"email=a&metadata" + b"[k]" * 5000 + b"=v",
        b"&".join(b"metadata[k%d]=v" % i for i in range(50_000)),
        b"email=" + b"x" * 2_000_000,
        b"email=\xff\xfe",
        b"email=a&email[x]=b",
        b"metadata=notahash",
    ],
)
async def test_hostile_bodies_are_400_and_the_sim_lives_on(sim: StripeSim, body: bytes) -> None:
    async with httpx.AsyncClient(base_url=sim.url, headers=FORM) as raw:
        response = await raw.post("/v1/customers", content=body)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["type"] == "invalid_request_error"
        after = await raw.post("/v1/customers", content=b"email=ok%40example.com")
    assert after.status_code == 200 and len(sim.customers) == 1


async def test_hostile_query_strings_and_bad_values(sim: StripeSim) -> None:
    async with httpx.AsyncClient(base_url=sim.url, headers=AUTH) as raw:
        deep = await raw.get("/v1/payment_intents?created" + "[gte]" * 50 + "=1")
        bad_limit = await raw.get("/v1/payment_intents?limit=ten")
        bad_created = await raw.get("/v1/payment_intents?created[between]=1")
        bad_bool = await raw.post(
            "/v1/payment_intents",
            content=b"amount=100&currency=usd&confirm=yes",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        bad_amount = await raw.post(
            "/v1/payment_intents",
            content=b"amount=1e9&currency=usd",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
    assert [r.status_code for r in (deep, bad_limit, bad_created, bad_bool, bad_amount)] == [
        400
    ] * 5
    assert bad_bool.json()["error"]["param"] == "confirm"
    assert bad_amount.json()["error"]["param"] == "amount"
    assert not sim.payment_intents


async def test_control_routes_over_http(sim: StripeSim) -> None:
    async with httpx.AsyncClient(base_url=sim.url, headers=AUTH) as raw:
        pi = (
            await raw.post(
                "/v1/payment_intents",
                content=b"amount=500&currency=usd&payment_method=pm_card_authenticationRequired"
                b"&confirm=true",
                headers={"content-type": "application/x-www-form-urlencoded"},
            )
        ).json()
        assert pi["status"] == "requires_action"
        done = await raw.post("/_sim/complete_authentication", json={"payment_intent": pi["id"]})
        assert done.status_code == 200 and done.json()["status"] == "succeeded"
        dispute = await raw.post("/_sim/create_dispute", json={"payment_intent": pi["id"]})
        assert dispute.json()["object"] == "dispute"
        config = await raw.post("/_sim/config", json={"outage": "500", "webhooks_paused": True})
        assert config.json()["outage"] == "500" and sim.webhooks_paused
        down = await raw.get(f"/v1/payment_intents/{pi['id']}")
        assert down.status_code == 500 and down.json()["error"]["type"] == "api_error"
        await raw.post("/_sim/config", json={"outage": None})
        events = await raw.get("/_sim/events")
        assert [e["type"] for e in events.json()["data"]][-1] == "charge.dispute.created"
        unknown = await raw.post("/_sim/explode", json={})
        assert unknown.status_code == 404
        no_key = await raw.post("/_sim/config", json={}, headers={"authorization": "Bearer no"})
        assert no_key.status_code == 401


async def test_cli_serves_until_sigterm() -> None:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "bench.stripe", "--port", "0", "--secret-key", "sk_test_cli"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(20):
            while not line.endswith(b"\n"):
                line += await process.stdout.receive_some(1)
        url = line.decode().strip().rsplit(" ", 1)[1]
        assert line.startswith(b"stripe listening on http://127.0.0.1:")
        async with httpx.AsyncClient(base_url=url) as raw:
            created = await raw.post(
                "/v1/customers",
                content=b"email=cli%40example.com",
                headers={
                    "authorization": "Bearer sk_test_cli",
                    "content-type": "application/x-www-form-urlencoded",
                },
            )
        assert created.status_code == 200 and created.json()["email"] == "cli@example.com"
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
