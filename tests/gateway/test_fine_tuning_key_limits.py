"""A secret key's limits apply to fine-tuning as to inference (issue #19, items 8 and 9), over
real HTTP on every backend: `allowed_models` on the base model of a job, and the key's daily
and monthly budgets on its training spend (held at creation, settled or released at the end),
with budgets checked by one instance or shared through Redis."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from tests.backends import REDIS_URL
from tests.gateway.fine_tuning_rig import (
    BASE,
    GOOD_LINE_TOKENS,
    create,
    dataset,
    drive,
    ft_rig,
    ft_watcher,
    hold_for,
    micros,
    status_is,
    upload,
)
from tests.gateway.keys_client import create_key, error_of
from tests.harness import Gateway

pytestmark = pytest.mark.storage


async def test_a_base_model_outside_allowed_models_is_403(
    database_url: str, tmp_path: Path
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw = rig.gateway
        await gw.runtime.supervisor.stop("fine_tuning_watcher")
        limited = await create_key(gw, name="mini only", allowed_models=["small"])
        file_id = await upload(gw, limited["key"], dataset(2))
        r = await create(gw, limited["key"], model=BASE, training_file=file_id)
        assert r.status_code == 403, r.text
        error = error_of(r)
        assert (error["type"], error["code"], error["param"]) == (
            "permission_error",
            "model_not_allowed",
            "model",
        )
        listed = await gw.client.get("/v1/fine_tuning/jobs", headers=gw.auth())
        assert listed.json()["data"] == []
        rows, _ = await gw.runtime.storage.ledger.list(gw.org_id, limit=50, offset=0)
        assert all(t.type != "usage" for t in rows)  # no training hold was taken
        allowed = await create_key(gw, name="trainer", allowed_models=[BASE])
        file_id = await upload(gw, allowed["key"], dataset(2))
        r = await create(gw, allowed["key"], model=BASE, training_file=file_id)
        assert r.status_code == 200, r.text


# -- item 9: training counts against the key's budgets -----------------------------------------

HOLDS = ["local"] + (["redis"] if REDIS_URL else [])
CHAT = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def _env(holds: str) -> dict[str, str]:
    """Budgets checked by this instance alone, or shared in Redis as across instances."""
    return {"GATEWAY_REDIS_URL": REDIS_URL} if holds == "redis" and REDIS_URL else {}


async def _budget_key(gw: Gateway, **budget: float) -> tuple[str, str]:
    made = await create_key(gw, name=f"trainer {budget}", **budget)
    return made["id"], made["key"]


async def _usage(gw: Gateway, key_id: str) -> tuple[float, float]:
    item = (await gw.client.get(f"/v1/keys/{key_id}", headers=gw.auth())).json()
    return item["usage_today_usd"], item["usage_month_usd"]


async def _budget_events(gw: Gateway, key_id: str) -> list[tuple[str, int]]:
    await gw.runtime.accountant.flush()
    found = await gw.runtime.storage.events.list_for_org(gw.org_id, limit=1000)
    return sorted(
        (e.type, e.data["threshold_percent"])
        for e in found
        if e.type.startswith("budget.") and e.data["key_id"] == key_id
    )


@pytest.mark.parametrize("holds", HOLDS)
async def test_a_training_hold_counts_against_the_keys_budget_until_released(
    database_url: str, tmp_path: Path, holds: str
) -> None:
    async with ft_rig(database_url, tmp_path, **_env(holds)) as rig:
        gw = rig.gateway
        await gw.runtime.supervisor.stop("fine_tuning_watcher")
        content = dataset(4)
        hold = hold_for(content)
        key_id, key = await _budget_key(gw, daily_budget_usd=hold / 1e6)  # exactly the hold
        file_id = await upload(gw, key, content)
        r = await create(gw, key, model=BASE, training_file=file_id)
        assert r.status_code == 200, r.text
        job_id = r.json()["id"]
        assert await _usage(gw, key_id) == (hold / 1e6, hold / 1e6)
        # The budget is used up by the hold: inference and another job are refused.
        refused = await rig.chat(CHAT, key=key)
        assert refused.status_code == 402 and error_of(refused)["code"] == "budget_exceeded"
        again = await create(gw, key, model=BASE, training_file=file_id)
        assert again.status_code == 402 and error_of(again)["code"] == "budget_exceeded"
        assert "training hold" in error_of(again)["message"]
        assert await _budget_events(gw, key_id) == [
            ("budget.exhausted", 100),
            ("budget.threshold", 50),
            ("budget.threshold", 80),
            ("budget.threshold", 100),
        ]
        rows, _ = await gw.runtime.storage.ledger.list(gw.org_id, limit=50, offset=0)
        assert [t.key_id for t in rows if t.id == f"txn_{job_id}_hold"] == [key_id]
        # Cancelled, the hold is released: back to the key's budget at once.
        cancelled = await gw.client.post(
            f"/v1/fine_tuning/jobs/{job_id}/cancel", headers=gw.auth(key)
        )
        assert cancelled.status_code == 200, cancelled.text
        assert await _usage(gw, key_id) == (0, 0)
        assert (await rig.chat(CHAT, key=key)).status_code == 200


@pytest.mark.parametrize("holds", HOLDS)
async def test_a_job_beyond_the_keys_budget_is_402_and_creates_nothing(
    database_url: str, tmp_path: Path, holds: str
) -> None:
    async with ft_rig(database_url, tmp_path, **_env(holds)) as rig:
        gw = rig.gateway
        await gw.runtime.supervisor.stop("fine_tuning_watcher")
        key_id, key = await _budget_key(gw, monthly_budget_usd=5.0)
        file_id = await upload(gw, key, dataset(10))  # $6.6456 held for the pricey model
        r = await create(gw, key, model="pricey-2024-07-18", training_file=file_id)
        assert r.status_code == 402, r.text
        error = error_of(r)
        assert (error["type"], error["code"]) == ("billing_error", "budget_exceeded")
        assert "monthly budget" in error["message"]
        listed = await gw.client.get("/v1/fine_tuning/jobs", headers=gw.auth())
        assert listed.json()["data"] == []
        rows, _ = await gw.runtime.storage.ledger.list(gw.org_id, type="usage", limit=50, offset=0)
        assert rows == []
        assert await _usage(gw, key_id) == (0, 0)
        assert await _budget_events(gw, key_id) == [("budget.exhausted", 100)]
        # The organization could pay for it: only the key's budget refused it.
        unlimited = await create(gw, rig.key, model="pricey-2024-07-18", training_file=file_id)
        assert unlimited.status_code == 200, unlimited.text


async def test_a_finished_job_leaves_its_charge_in_the_keys_spend(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw = rig.gateway
        content = dataset(10)
        key_id, key = await _budget_key(gw, daily_budget_usd=1.0)
        file_id = await upload(gw, key, content)
        r = await create(gw, key, model=BASE, training_file=file_id)
        assert r.status_code == 200, r.text
        job_id = r.json()["id"]
        assert await _usage(gw, key_id) == (hold_for(content) / 1e6,) * 2
        await drive(mock_clock, [ft_watcher(gw)], status_is(gw, key, job_id, "succeeded"))
        charge = micros(10 * GOOD_LINE_TOKENS)  # what was trained; the rest of the hold back
        assert charge < hold_for(content)
        assert await _usage(gw, key_id) == (charge / 1e6,) * 2
