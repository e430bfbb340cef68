"""With PostgreSQL (or one SQLite file) and Redis shared, budgets and balances hold across
gateway instances: 200 concurrent requests spread over two instances never spend past a key's
budget or the organization's balance, and the balance still equals the sum of its rows."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.backends import REDIS_URL
from tests.harness import Gateway
from tests.inference import two_instances
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(REDIS_URL is None, reason="needs GATEWAY_TEST_REDIS_URL")

BODY = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}


async def flushed_usage(a: Gateway, b: Gateway, settled: int) -> None:
    accountants = (a.runtime.accountant, b.runtime.accountant)
    await wait_until(lambda: sum(acc.stats.settled for acc in accountants) >= settled)
    for acc in accountants:
        await acc.flush()


async def burst(gateways: tuple[Gateway, Gateway], key: str, n: int) -> list[tuple[int, str]]:
    """n requests at once, alternating instances: (status, error code or "")."""
    out: list[tuple[int, str]] = []

    async def one(i: int) -> None:
        gw = gateways[i % 2]
        r = await gw.client.post("/v1/chat/completions", json=BODY, headers=gw.auth(key))
        out.append((r.status_code, r.json()["error"]["code"] if r.status_code != 200 else ""))

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    return out


async def test_a_budget_covering_50_admits_at_most_50_across_two_instances(
    database_url: str, tmp_path: Path
) -> None:
    assert REDIS_URL is not None
    async with two_instances(database_url, tmp_path, REDIS_URL) as (a, b):
        topup = await a.client.post("/v1/credits/topup", json={"amount_usd": 100}, headers=a.auth())
        assert topup.status_code == 200
        probe = await a.client.post("/v1/chat/completions", json=BODY, headers=a.auth())
        assert probe.status_code == 200
        await flushed_usage(a, b, 1)
        ledger = a.runtime.storage.ledger
        rows, _ = await ledger.list(a.org_id, type="usage", limit=1, offset=0)
        charge = -rows[0].amount_micros
        cap = 50 * charge
        r = await a.client.post(
            "/v1/keys", json={"name": "capped", "daily_budget_usd": cap / 1e6}, headers=a.auth()
        )
        key_id, key = r.json()["id"], r.json()["key"]

        results = await burst((a, b), key, 200)
        admitted = sum(1 for status, _ in results if status == 200)
        assert 0 < admitted <= 50
        assert {code for status, code in results if status != 200} == {"budget_exceeded"}
        await flushed_usage(a, b, admitted + 1)
        rows, total = await ledger.list(a.org_id, type="usage", limit=200, offset=0)
        assert total == admitted + 1
        assert -sum(r.amount_micros for r in rows if r.key_id == key_id) == admitted * charge
        assert admitted * charge <= cap
        account = await ledger.account(a.org_id)
        assert account.balance_micros == await ledger.sum_rows(a.org_id)
        assert account.balance_micros == 100_000_000 - (admitted + 1) * charge


async def test_a_balance_covering_about_50_is_never_overspent_across_two_instances(
    database_url: str, tmp_path: Path
) -> None:
    assert REDIS_URL is not None
    async with two_instances(database_url, tmp_path, REDIS_URL) as (a, b):
        ledger = a.runtime.storage.ledger
        # Each request holds up to ~45 micro-USD; 2,000 of credit covers about 45 of them.
        await a.runtime.accountant.credit(a.org_id, "adjustment", 2_000, "test credit")
        r = await a.client.post("/v1/keys", json={"name": "k"}, headers=a.auth())
        results = await burst((a, b), r.json()["key"], 200)
        admitted = sum(1 for status, _ in results if status == 200)
        assert 0 < admitted < 200
        assert {code for status, code in results if status != 200} == {"insufficient_credits"}
        await flushed_usage(a, b, admitted)
        account = await ledger.account(a.org_id)
        assert account.balance_micros >= 0
        assert account.balance_micros == await ledger.sum_rows(a.org_id)
        _, total = await ledger.list(a.org_id, type="usage", limit=200, offset=0)
        assert total == admitted
