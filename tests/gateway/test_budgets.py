"""Per-key daily and monthly budgets over real HTTP, on both backends: 402 `budget_exceeded`,
`budget.threshold` and `budget.exhausted` events, the keys list's spend, and 200 concurrent
requests against a budget that covers 50."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.money import format_usd
from tests.inference import Rig, inference_rig
from tests.waiting import wait_until

BODY = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


async def budget_key(rig: Rig, **budget: float) -> tuple[str, str]:
    r = await rig.gateway.client.post(
        "/v1/keys", json={"name": f"b{budget}", **budget}, headers=rig.gateway.auth()
    )
    assert r.status_code == 200, r.text
    return r.json()["id"], r.json()["key"]


async def one_charge(rig: Rig) -> int:
    """What BODY costs, measured with the rig's uncapped key."""
    accountant = rig.gateway.runtime.accountant
    before = accountant.stats.settled
    assert (await rig.chat(BODY)).status_code == 200
    await wait_until(lambda: accountant.stats.settled > before)
    await accountant.flush()
    rows, _ = await rig.gateway.runtime.storage.ledger.list(
        rig.gateway.org_id, type="usage", limit=1, offset=0
    )
    return -rows[0].amount_micros


async def events(rig: Rig) -> list[Any]:
    await rig.gateway.runtime.accountant.flush()
    return await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id, limit=1000)


async def test_a_daily_budget_refuses_with_402_and_writes_events_once(rig: Rig) -> None:
    charge = await one_charge(rig)
    cap = 24 * charge // 10  # two requests reach 83 %; a third cannot fit
    key_id, key = await budget_key(rig, daily_budget_usd=cap / 1e6)
    statuses = [(await rig.chat(BODY, key=key)).status_code for _ in range(2)]
    assert statuses == [200, 200]
    refused = await rig.chat(BODY, key=key)
    assert refused.status_code == 402
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded" and error["type"] == "billing_error"
    assert "daily budget" in error["message"]
    assert (await rig.chat(BODY, key=key)).status_code == 402
    assert (await rig.chat(BODY)).status_code == 200  # other keys are not held back
    budget_events = [e for e in await events(rig) if e.type.startswith("budget.")]
    # The refusal writes budget.exhausted at once; thresholds come with the usage rows.
    assert sorted((e.type, e.data["threshold_percent"]) for e in budget_events) == [
        ("budget.exhausted", 100),
        ("budget.threshold", 50),
        ("budget.threshold", 80),
    ]
    threshold = next(e.data for e in budget_events if e.type == "budget.threshold")
    assert threshold["key_id"] == key_id and threshold["period"] == "daily"
    assert threshold["budget_usd"] == cap / 1e6
    assert threshold["spent_usd"] == 2 * charge / 1e6
    listed = (await rig.gateway.client.get(f"/v1/keys/{key_id}", headers=rig.gateway.auth())).json()
    assert listed["usage_today_usd"] == listed["usage_month_usd"] == 2 * charge / 1e6


async def test_a_monthly_budget_applies_too(rig: Rig) -> None:
    charge = await one_charge(rig)
    _, key = await budget_key(rig, monthly_budget_usd=1.5 * charge / 1e6)
    assert (await rig.chat(BODY, key=key)).status_code == 200
    refused = await rig.chat(BODY, key=key)
    assert refused.status_code == 402 and "monthly budget" in refused.json()["error"]["message"]


async def test_raising_the_budget_lets_the_key_spend_again(rig: Rig) -> None:
    charge = await one_charge(rig)
    key_id, key = await budget_key(rig, daily_budget_usd=1.5 * charge / 1e6)
    assert (await rig.chat(BODY, key=key)).status_code == 200
    assert (await rig.chat(BODY, key=key)).status_code == 402
    r = await rig.gateway.client.patch(
        f"/v1/keys/{key_id}", json={"daily_budget_usd": None}, headers=rig.gateway.auth()
    )
    assert r.status_code == 200
    assert (await rig.chat(BODY, key=key)).status_code == 200


async def test_200_concurrent_requests_on_a_budget_covering_50(rig: Rig) -> None:
    charge = await one_charge(rig)
    cap = 50 * charge
    key_id, key = await budget_key(rig, daily_budget_usd=cap / 1e6)
    statuses: list[int] = []
    codes: set[str] = set()

    async def call() -> None:
        r = await rig.chat(BODY, key=key)
        statuses.append(r.status_code)
        if r.status_code != 200:
            codes.add(r.json()["error"]["code"])

    async with trio.open_nursery() as nursery:
        for _ in range(200):
            nursery.start_soon(call)
    admitted = statuses.count(200)
    assert 0 < admitted <= 50
    assert statuses.count(402) == 200 - admitted and codes == {"budget_exceeded"}
    accountant = rig.gateway.runtime.accountant
    await wait_until(lambda: accountant.stats.settled >= admitted + 1)
    await accountant.flush()
    storage = rig.gateway.runtime.storage
    org = rig.gateway.org_id
    rows, total = await storage.ledger.list(org, type="usage", limit=200, offset=0)
    spent_by_key = -sum(r.amount_micros for r in rows if r.key_id == key_id)
    assert spent_by_key == admitted * charge <= cap
    assert total == admitted + 1
    account = await storage.ledger.account(org)
    assert account.balance_micros == await storage.ledger.sum_rows(org)
    assert account.balance_micros == 100_000_000 - (admitted + 1) * charge
    exhausted = [e for e in await events(rig) if e.type == "budget.exhausted"]
    assert len(exhausted) == 1


def amounts(message: str) -> list[str]:
    return re.findall(r"-?\$[0-9][0-9,]*\.[0-9]+", message)


async def test_a_sub_cent_budget_is_stated_exactly_in_the_402(rig: Rig) -> None:
    """Issue #20: a $0.000005 budget read "$0.00 … ($0.000000 spent or held)". The 402 states
    the budget, what was spent, what is held and the request's estimate, none rounded."""
    _, key = await budget_key(rig, daily_budget_usd=0.000005)
    refused = await rig.chat(BODY, key=key)
    assert refused.status_code == 402
    message = refused.json()["error"]["message"]
    assert "daily budget of $0.000005 " in message, message
    assert "$0.00 spent and $0.00 held for requests in flight leave $0.000005" in message
    estimate = amounts(message.split("estimated at up to ", 1)[1])[0]
    assert float(estimate[1:]) > 0.000005  # the hold that does not fit, stated in full
    assert "resets at" in message


async def test_the_402_separates_spent_from_the_estimate(rig: Rig) -> None:
    charge = await one_charge(rig)  # micro-dollars, well below a cent
    budget = charge + charge // 2
    _, key = await budget_key(rig, daily_budget_usd=budget / 1e6)
    assert (await rig.chat(BODY, key=key)).status_code == 200
    await wait_until(lambda: rig.gateway.runtime.accountant.pending_micros(rig.gateway.org_id) > 0)
    refused = await rig.chat(BODY, key=key)
    assert refused.status_code == 402
    message = refused.json()["error"]["message"]
    assert f"daily budget of {format_usd(budget)} " in message, message
    assert f"{format_usd(charge)} spent and $0.00 held" in message
    assert f"leave {format_usd(budget - charge)}, and this request" in message
