"""What inference requests are charged, over real HTTP against the simulated upstream, on both
backends: provider cost × (1 + platform fee), usage rows carrying the model and request id,
streams with and without `include_usage`, disconnects, failures, and insufficient credits."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.billing import charge_micros
from tests.inference import PRICE_IN, PRICE_OUT, Rig, chunks, inference_rig, ledger, open_raw_stream
from tests.waiting import wait_until

MESSAGES = [{"role": "user", "content": "hello there"}]
CREDIT = 100_000_000  # the rig's top-up, micro-USD


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


def expected_charge(usage: dict[str, int], fee: str = "4") -> int:
    cost = (usage["prompt_tokens"] * PRICE_IN + usage["completion_tokens"] * PRICE_OUT) / 10**6
    return charge_micros(cost, Decimal(fee))


async def test_json_completion_is_charged_cost_plus_the_free_plan_fee(rig: Rig) -> None:
    r = await rig.chat({"model": "small", "messages": MESSAGES, "max_tokens": 7})
    assert r.status_code == 200
    charge = expected_charge(r.json()["usage"])
    balance, rows = await ledger(rig)
    assert balance == CREDIT - charge
    assert len(rows) == 1
    row = rows[0]
    assert row.amount_micros == -charge and row.balance_after_micros == balance
    assert row.model == "sim/sim-small"
    assert row.request_id == r.headers["x-request-id"] and row.request_id.startswith("req_")
    listed = (
        await rig.gateway.client.get(
            "/v1/credits/transactions?type=usage", headers=rig.gateway.auth()
        )
    ).json()["data"][0]
    assert listed["model"] == "sim/sim-small" and listed["request_id"] == row.request_id
    assert listed["amount_usd"] == -charge / 1e6
    credits = (await rig.gateway.client.get("/v1/credits", headers=rig.gateway.auth())).json()
    assert credits["lifetime_spend_usd"] == charge / 1e6


async def test_pro_plan_pays_two_and_a_half_percent(rig: Rig) -> None:
    storage = rig.gateway.runtime.storage
    await storage.db.execute(
        "UPDATE orgs SET plan = 'pro' WHERE id = :id", {"id": rig.gateway.org_id}
    )
    rig.gateway.runtime.accountant.refresh(rig.gateway.org_id)  # else seen within a second
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    balance, _ = await ledger(rig)
    assert balance == CREDIT - expected_charge(r.json()["usage"], fee="2.5")


@pytest.mark.parametrize("include_usage", [True, False])
async def test_streams_are_charged_with_and_without_include_usage(
    rig: Rig, include_usage: bool
) -> None:
    # The same request as JSON first: its usage is what the stream's upstream reports too.
    plain = await rig.chat({"model": "small", "messages": MESSAGES})
    first = expected_charge(plain.json()["usage"])
    body: dict[str, Any] = {"model": "small", "messages": MESSAGES, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    r = await rig.chat(body)
    assert r.status_code == 200
    sent = [c["usage"] for c in chunks(r.text) if c.get("usage")]
    assert len(sent) == (1 if include_usage else 0)
    # The gateway asked the upstream for usage either way; that is what is charged.
    balance, rows = await ledger(rig, settled=2)
    assert len(rows) == 2 and rows[0].request_id == r.headers["x-request-id"]
    assert rows[0].amount_micros == -first
    assert balance == CREDIT - 2 * first
    if include_usage:
        assert sent[0] == plain.json()["usage"]


async def test_failed_requests_are_not_charged(rig: Rig) -> None:
    r = await rig.chat({"model": "gone", "messages": MESSAGES})
    assert r.status_code == 502
    r = await rig.chat({"model": "gone", "messages": MESSAGES, "stream": True})
    assert r.status_code == 502
    rig.upstream.behavior.fail_status = 500
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    assert r.status_code == 502
    balance, rows = await ledger(rig)
    assert (balance, rows) == (CREDIT, [])
    assert rig.gateway.runtime.accountant.statistics()["settled"] == 0


async def test_without_credit_requests_get_402_and_never_reach_the_upstream(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, credit_usd=None) as rig:
        for body in (
            {"model": "small", "messages": MESSAGES},
            {"model": "small", "messages": MESSAGES, "stream": True},
        ):
            r = await rig.chat(body)
            assert r.status_code == 402
            error = r.json()["error"]
            assert error["code"] == "insufficient_credits" and error["type"] == "billing_error"
        r = await rig.gateway.client.post(
            "/v1/embeddings",
            json={"model": "embed", "input": "hi"},
            headers=rig.gateway.auth(rig.key),
        )
        assert r.status_code == 402
        assert rig.upstream.requests == []


async def test_billing_off_charges_nothing(database_url: str, tmp_path: Path) -> None:
    extra = "\n[billing]\nenabled = false\n"
    async with inference_rig(database_url, tmp_path, credit_usd=None, extra_toml=extra) as rig:
        r = await rig.chat({"model": "small", "messages": MESSAGES})
        assert r.status_code == 200
        balance, rows = await ledger(rig)
        assert (balance, rows) == (0, [])


async def test_concurrent_requests_never_spend_more_than_the_balance(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, credit_usd=5.0) as rig:
        # Each request may cost up to its reservation (prompt estimate + max_tokens): make the
        # balance cover about 50 of them, then send 200 at once.
        rig.upstream.behavior.completion_tokens = 100_000
        body = {"model": "small", "messages": MESSAGES, "max_tokens": 60_000}
        statuses: list[int] = []

        async def one() -> None:
            statuses.append((await rig.chat(body)).status_code)

        async with trio.open_nursery() as nursery:
            for _ in range(200):
                nursery.start_soon(one)
        assert set(statuses) <= {200, 402}
        admitted = statuses.count(200)
        assert 0 < admitted < 200
        balance, rows = await ledger(rig)
        assert len(rows) == admitted
        assert balance >= 0  # never overspent
        assert balance == 5_000_000 + sum(r.amount_micros for r in rows)


async def test_a_disconnected_stream_is_charged_for_what_was_relayed(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="gateway.access")
    rig.upstream.behavior.chunk_interval_s = 0.05
    rig.upstream.behavior.completion_tokens = 1000
    body = {"model": "small", "messages": MESSAGES, "stream": True}
    stream = await open_raw_stream(rig, body, frames=4)
    await stream.aclose()

    def entry() -> dict[str, Any] | None:
        for rec in caplog.records:
            if rec.name == "gateway.access":
                line = json.loads(rec.getMessage())
                if line["route"] == "/v1/chat/completions":
                    return line  # type: ignore[no-any-return]
        return None

    await wait_until(lambda: entry() is not None)
    logged = entry()
    assert logged is not None and logged["status"] == 499
    balance, rows = await ledger(rig, settled=1)
    assert len(rows) == 1
    relayed = logged["completion_tokens"]
    assert 3 <= relayed < 1000
    usage = {"prompt_tokens": logged["prompt_tokens"], "completion_tokens": relayed}
    assert rows[0].amount_micros == -expected_charge(usage)
    assert balance == CREDIT - expected_charge(usage)
