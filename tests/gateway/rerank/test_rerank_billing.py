"""What a rerank is charged, on both backends and through both adapters: search units × the
model's `usd_per_search_unit` × (1 + plan fee), exact to the micro-dollar, one usage row with
the model and request id, the balance the sum of the ledger rows. Cohere's own count of billed
units is used when it gives one, never above one unit per document; failures cost nothing;
with the org's own provider key a rerank costs nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from protocol.billing import charge_micros
from tests.gateway.rerank.support import (
    CREDIT,
    HOSTILE,
    ODD_UNIT_USD,
    SEARCH_UNIT_USD,
    rerank,
    rerank_requests,
    rerank_rig,
)
from tests.inference import Rig, ledger

DOCUMENTS = ["apple", "pear", "apple pie"]
FREE_FEE = Decimal("4")


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with rerank_rig(database_url, tmp_path) as r:
        yield r


def expected(units: int, price: Decimal = SEARCH_UNIT_USD) -> int:
    return charge_micros(units * price, FREE_FEE)


@pytest.mark.parametrize(
    ("model", "canonical", "price"),
    [
        ("rerank", "sim/sim-rerank", SEARCH_UNIT_USD),
        ("rerank-english-v3.0", "co/rerank-english-v3.0", SEARCH_UNIT_USD),
        ("rerank-odd", "co/rerank-odd", ODD_UNIT_USD),
    ],
)
async def test_one_search_unit_per_document(
    rig: Rig, model: str, canonical: str, price: Decimal
) -> None:
    body = {"model": model, "query": "apple", "documents": DOCUMENTS, "top_n": 1}
    r = await rerank(rig, body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"] == {"search_units": 3, "billed_units": {"search_units": 3}}
    balance, rows = await ledger(rig, settled=1)
    charge = expected(3, price)
    assert charge == (4 if price == ODD_UNIT_USD else 6240)  # 4.056 rounds to 4
    assert balance == CREDIT - charge
    (row,) = rows
    assert row.amount_micros == -charge and row.balance_after_micros == balance
    assert row.model == canonical and row.request_id == r.headers["x-request-id"]


async def test_cohere_billed_units_are_charged(rig: Rig) -> None:
    body = {"model": "co-billed-1", "query": "apple", "documents": DOCUMENTS}
    r = await rerank(rig, body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"] == {"search_units": 1, "billed_units": {"search_units": 1}}
    assert r.json()["meta"] == {"billed_units": {"search_units": 1}}
    balance, (row,) = await ledger(rig, settled=1)
    assert balance == CREDIT - expected(1) and row.amount_micros == -expected(1)


async def test_cohere_billed_units_never_exceed_one_per_document(rig: Rig) -> None:
    body = {"model": "co-billed-99", "query": "apple", "documents": DOCUMENTS}
    r = await rerank(rig, body)
    assert r.json()["usage"]["search_units"] == 3
    balance, _ = await ledger(rig, settled=1)
    assert balance == CREDIT - expected(3)


async def test_several_requests_add_up(rig: Rig) -> None:
    for model in ("rerank", "rerank-english-v3.0", "co-billed-1"):
        body = {"model": model, "query": "apple", "documents": DOCUMENTS}
        assert (await rerank(rig, body)).status_code == 200
    balance, rows = await ledger(rig, settled=3)
    assert balance == CREDIT - 2 * expected(3) - expected(1)
    assert sorted(-row.amount_micros for row in rows) == sorted([expected(3)] * 2 + [expected(1)])


async def test_failures_cost_nothing(rig: Rig) -> None:
    for name in HOSTILE:
        body = {"model": f"co-{name}", "query": "apple", "documents": DOCUMENTS}
        assert (await rerank(rig, body)).status_code == 502
    rig.upstream.behavior.fail_status = 500
    assert (
        await rerank(rig, {"model": "rerank", "query": "a", "documents": ["a"]})
    ).status_code == 502
    balance, rows = await ledger(rig)
    assert (balance, rows) == (CREDIT, [])
    assert rig.gateway.runtime.accountant.statistics()["settled"] == 0


@pytest.mark.parametrize(
    ("provider", "model", "canonical", "path"),
    [
        ("sim", "rerank", "sim/sim-rerank", "/v1/rerank"),
        ("co", "rerank-english-v3.0", "co/rerank-english-v3.0", "/cohere/v1/rerank"),
    ],
)
async def test_the_orgs_own_key_costs_nothing(
    rig: Rig, provider: str, model: str, canonical: str, path: str
) -> None:
    gw = rig.gateway
    own = "sk-org-own-rerank-key"
    added = await gw.client.post(
        "/v1/provider_keys", json={"provider": provider, "api_key": own}, headers=gw.auth()
    )
    assert added.status_code == 201, added.text
    r = await rerank(rig, {"model": model, "query": "apple", "documents": DOCUMENTS})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["search_units"] == 3  # units are reported; the money is 0
    sent = [q for q in rig.upstream.requests if q.path == path][-1]
    assert sent.headers["authorization"] == f"Bearer {own}"
    balance, rows = await ledger(rig, settled=1)
    assert balance == CREDIT
    assert [(row.amount_micros, row.model) for row in rows] == [(0, canonical)]
    assert len(rerank_requests(rig)) == 1
    # The provider refusing the org's key later: 400 naming the provider, nothing charged.
    rig.upstream.behavior.rejected_keys = frozenset({own})
    r = await rerank(rig, {"model": model, "query": "apple", "documents": DOCUMENTS})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_provider_key"
    assert provider in r.json()["error"]["message"]
    balance, rows = await ledger(rig)
    assert balance == CREDIT and len(rows) == 1
