"""Credits and billing over real HTTP, on both backends: account, top-ups (limits, declines,
permissions, idempotency), transactions and the subscription."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gateway.credits.refund_command import refund_command
from protocol.credentials import CredentialKind
from tests.harness import Gateway, gateway_config, running_gateway


@pytest.fixture
async def gateway(database_url: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    async with running_gateway(gateway_config(database_url, tmp_path)) as gw:
        yield gw


async def secret_key(gw: Gateway, scopes: list[str] | None) -> str:
    body: dict[str, Any] = {"name": f"k{scopes}"}
    if scopes is not None:
        body["scopes"] = scopes
    r = await gw.client.post("/v1/keys", json=body, headers=gw.auth())
    assert r.status_code == 200, r.text
    return str(r.json()["key"])


async def balance(gw: Gateway) -> float:
    return float((await gw.client.get("/v1/credits", headers=gw.auth())).json()["balance_usd"])


async def topup(gw: Gateway, body: dict[str, Any], key: str | None = None, **headers: str) -> Any:
    return await gw.client.post("/v1/credits/topup", json=body, headers={**gw.auth(key), **headers})


async def test_a_new_account_is_empty(gateway: Gateway) -> None:
    r = await gateway.client.get("/v1/credits", headers=gateway.auth())
    assert r.status_code == 200
    assert r.json() == {
        "balance_usd": 0.0,
        "lifetime_spend_usd": 0.0,
        "auto_replenish": False,
        "replenish_amount_usd": 0.0,
        "replenish_threshold_usd": 0.0,
        "auto_replenish_failure": None,
    }


async def test_topup_adds_credit_with_the_default_method(gateway: Gateway) -> None:
    r = await topup(gateway, {"amount_usd": 25.5})
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["transaction_id"].startswith("txn_")
    assert result["amount_usd"] == 25.5 and result["new_balance_usd"] == 25.5
    datetime.fromisoformat(result["created_at"].replace("Z", "+00:00"))
    r = await topup(gateway, {"amount_usd": 5, "payment_method_id": "pm_card_visa"})
    assert r.json()["new_balance_usd"] == 30.5
    assert await balance(gateway) == 30.5


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"amount_usd": 4.99}, 400, "amount_usd", "amount_too_small"),
        ({"amount_usd": 0}, 400, "amount_usd", None),
        ({"amount_usd": 100_000.01}, 400, "amount_usd", "amount_too_large"),
        ({}, 400, "amount_usd", None),
        ({"amount_usd": "10"}, 400, "amount_usd", None),
        ({"amount_usd": 10, "payment_method_id": "pm_nope"}, 400, "payment_method_id", None),
        ({"amount_usd": 10, "card": "x"}, 400, "card", None),
        (
            {"amount_usd": 10, "payment_method_id": "pm_card_chargeDeclined"},
            402,
            "payment_method_id",
            "card_declined",
        ),
    ],
)
async def test_refused_topups_leave_the_balance_unchanged(
    gateway: Gateway, body: dict[str, Any], status: int, param: str, code: str | None
) -> None:
    await topup(gateway, {"amount_usd": 10})
    r = await topup(gateway, body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"]
    if code is not None:
        assert error["code"] == code
    assert await balance(gateway) == 10.0
    txns = (await gateway.client.get("/v1/credits/transactions", headers=gateway.auth())).json()
    assert txns["total"] == 1


# Amounts as JSON spells them (raw, so the exact token reaches the gateway): beyond what
# Decimal's default 28 digits can quantize (they were 500 decimal.InvalidOperation), the
# largest doubles, a 24-digit integer, negative zero, and amounts below a micro-dollar.
HUGE = [b"1e22", b"1.47e308", b"1.7976931348623157e308", b"123456789012345678901234", b"1E+300"]
TINY = [b"5e-324", b"1e-7", b"0.0000004"]
ZEROES = [b"-0.0", b"-0", b"0e0", b"-1e-300"]


# Beyond a double, and not numbers at all (JSON has no NaN): refused whole, `param` where the
# field could be read.
BEYOND = [
    (b"1e400", "amount_usd", None),
    (b"-1e400", "amount_usd", None),
    (b"NaN", None, "invalid_json"),
    (b"Infinity", None, "invalid_json"),
]


@pytest.mark.parametrize(
    ("amount", "param", "code"),
    [(a, "amount_usd", "amount_too_large") for a in HUGE]
    + [(a, "amount_usd", "amount_too_small") for a in TINY]
    + [(a, "amount_usd", None) for a in ZEROES]
    + BEYOND,
)
async def test_extreme_topup_amounts_are_400(
    gateway: Gateway, amount: bytes, param: str | None, code: str | None
) -> None:
    r = await gateway.client.post(
        "/v1/credits/topup",
        content=b'{"amount_usd": ' + amount + b"}",
        headers={**gateway.auth(), "content-type": "application/json"},
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == (param, code), error
    assert await balance(gateway) == 0.0


@pytest.mark.parametrize("amount", [*HUGE, b"-1e22", b"-5"])
@pytest.mark.parametrize(
    ("method", "path", "field"),
    [
        ("PATCH", "/v1/credits", "replenish_amount_usd"),
        ("PATCH", "/v1/credits", "replenish_threshold_usd"),
        ("POST", "/v1/keys", "daily_budget_usd"),
        ("POST", "/v1/keys", "monthly_budget_usd"),
    ],
)
async def test_extreme_amounts_in_settings_are_400_naming_the_field(
    gateway: Gateway, amount: bytes, method: str, path: str, field: str
) -> None:
    body = b'{"name": "k", "' + field.encode() + b'": ' + amount + b"}"
    if path == "/v1/credits":
        body = b'{"' + field.encode() + b'": ' + amount + b"}"
    r = await gateway.client.request(
        method,
        path,
        content=body,
        headers={**gateway.auth(), "content-type": "application/json"},
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field


async def test_scopes_guard_billing(gateway: Gateway) -> None:
    reader = await secret_key(gateway, ["billing:read"])
    writer = await secret_key(gateway, ["billing:write"])
    chat_only = await secret_key(gateway, ["chat:completions"])
    r = await topup(gateway, {"amount_usd": 10}, key=reader)
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    assert (await topup(gateway, {"amount_usd": 10}, key=writer)).status_code == 200
    for path in ("/v1/credits", "/v1/credits/transactions", "/v1/billing/subscription"):
        assert (await gateway.client.get(path, headers=gateway.auth(reader))).status_code == 200
        assert (await gateway.client.get(path, headers=gateway.auth(chat_only))).status_code == 403
        assert (await gateway.client.get(path)).status_code == 401
    r = await gateway.client.patch(
        "/v1/credits", json={"auto_replenish": False}, headers=gateway.auth(reader)
    )
    assert r.status_code == 403
    assert (await topup(gateway, {"amount_usd": 10}, key="service_sk_live_nope")).status_code == 401
    assert await balance(gateway) == 10.0


async def test_an_idempotency_key_makes_a_retried_topup_charge_once(gateway: Gateway) -> None:
    first = await topup(gateway, {"amount_usd": 20}, **{"Idempotency-Key": "t-1"})
    again = await topup(gateway, {"amount_usd": 20}, **{"Idempotency-Key": "t-1"})
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert await balance(gateway) == 20.0
    other = await topup(gateway, {"amount_usd": 30}, **{"Idempotency-Key": "t-1"})
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    fresh = await topup(gateway, {"amount_usd": 20}, **{"Idempotency-Key": "t-2"})
    assert fresh.json()["new_balance_usd"] == 40.0


async def test_a_declined_topup_releases_its_idempotency_key(gateway: Gateway) -> None:
    declined = {"amount_usd": 20, "payment_method_id": "pm_card_chargeDeclined"}
    headers = {"Idempotency-Key": "t-9"}
    assert (await topup(gateway, declined, **headers)).status_code == 402
    assert (await topup(gateway, declined, **headers)).status_code == 402
    assert await balance(gateway) == 0.0


async def test_a_threshold_one_top_up_cannot_clear_is_refused(gateway: Gateway) -> None:
    """Threshold below the amount: one top-up lifts any balance from 0 to the threshold above
    it. Otherwise every usage write would find the balance below it again (issue #20)."""
    patch = gateway.client.patch
    for threshold in (1e9, 50, 50.000001):
        r = await patch(
            "/v1/credits",
            json={
                "auto_replenish": True,
                "replenish_amount_usd": 50,
                "replenish_threshold_usd": threshold,
            },
            headers=gateway.auth(),
        )
        assert r.status_code == 400, threshold
        error = r.json()["error"]
        assert error["param"] == "replenish_threshold_usd"
        assert "must be below `replenish_amount_usd` ($50.00)" in error["message"]
    ok = {"auto_replenish": True, "replenish_amount_usd": 50, "replenish_threshold_usd": 49.99}
    assert (await patch("/v1/credits", json=ok, headers=gateway.auth())).status_code == 200
    # Lowering the amount under the stored threshold is refused the same way.
    r = await patch("/v1/credits", json={"replenish_amount_usd": 20}, headers=gateway.auth())
    assert r.status_code == 400 and r.json()["error"]["param"] == "replenish_threshold_usd"


async def test_auto_replenish_settings(gateway: Gateway) -> None:
    patch = gateway.client.patch
    r = await patch("/v1/credits", json={"auto_replenish": True}, headers=gateway.auth())
    assert r.status_code == 400 and r.json()["error"]["param"] == "replenish_amount_usd"
    r = await patch(
        "/v1/credits",
        json={"auto_replenish": True, "replenish_amount_usd": 4, "replenish_threshold_usd": 1},
        headers=gateway.auth(),
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "replenish_amount_usd"
    r = await patch(
        "/v1/credits",
        json={"auto_replenish": True, "replenish_amount_usd": 50, "replenish_threshold_usd": 10},
        headers=gateway.auth(),
    )
    assert r.status_code == 200
    assert r.json()["auto_replenish"] is True
    assert (r.json()["replenish_amount_usd"], r.json()["replenish_threshold_usd"]) == (50.0, 10.0)
    r = await patch("/v1/credits", json={"auto_replenish": False}, headers=gateway.auth())
    assert r.json()["auto_replenish"] is False and r.json()["replenish_amount_usd"] == 50.0
    # 0 and null clear a setting (read back as 0.0); auto-replenish cannot stay on without it
    for cleared in (0, None):
        r = await patch(
            "/v1/credits", json={"replenish_threshold_usd": cleared}, headers=gateway.auth()
        )
        assert r.status_code == 200 and r.json()["replenish_threshold_usd"] == 0.0
        assert r.json()["replenish_amount_usd"] == 50.0
        r = await patch(
            "/v1/credits",
            json={"auto_replenish": True, "replenish_threshold_usd": cleared},
            headers=gateway.auth(),
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "replenish_threshold_usd"
    account = await gateway.runtime.storage.ledger.account(gateway.org_id)
    assert account.replenish_threshold_micros is None
    r = await patch("/v1/credits", json={"balance_usd": 1e6}, headers=gateway.auth())
    assert r.status_code == 400 and r.json()["error"]["param"] == "balance_usd"
    assert await balance(gateway) == 0.0


async def test_transactions_list_filters_and_pages(gateway: Gateway) -> None:
    for amount in (5, 6, 7):
        await topup(gateway, {"amount_usd": amount})
    await gateway.runtime.accountant.credit(gateway.org_id, "adjustment", -1_000_000, "fix")
    get = gateway.client.get
    r = await get("/v1/credits/transactions", headers=gateway.auth())
    page = r.json()
    assert page["total"] == 4 and page["has_more"] is False
    assert [t["amount_usd"] for t in page["data"]] == [-1.0, 7.0, 6.0, 5.0]
    assert [t["balance_after_usd"] for t in page["data"]] == [17.0, 18.0, 11.0, 5.0]
    assert {t["type"] for t in page["data"]} == {"topup", "adjustment"}
    assert all("model" not in t and "request_id" not in t for t in page["data"])
    r = await get("/v1/credits/transactions?type=topup&limit=2", headers=gateway.auth())
    assert r.json()["total"] == 3 and len(r.json()["data"]) == 2 and r.json()["has_more"]
    r = await get("/v1/credits/transactions?type=topup&limit=2&offset=2", headers=gateway.auth())
    assert len(r.json()["data"]) == 1 and not r.json()["has_more"]
    today = datetime.now(UTC).date().isoformat()
    r = await get(f"/v1/credits/transactions?start_date={today}", headers=gateway.auth())
    assert r.json()["total"] == 4
    r = await get(f"/v1/credits/transactions?end_date={today}", headers=gateway.auth())
    assert r.json()["total"] == 0
    for query, param in (
        ("limit=201", "limit"),
        ("limit=0", "limit"),
        ("offset=-1", "offset"),
        ("type=gift", "type"),
        ("start_date=yesterday", "start_date"),
        ("start_date=2026-11-02&end_date=2026-11-01", "end_date"),
    ):
        r = await get(f"/v1/credits/transactions?{query}", headers=gateway.auth())
        assert r.status_code == 400 and r.json()["error"]["param"] == param, query


async def test_subscription_shows_plan_fee_period_and_method(gateway: Gateway) -> None:
    r = await gateway.client.get("/v1/billing/subscription", headers=gateway.auth())
    assert r.status_code == 200
    sub = r.json()
    assert sub["plan"] == "free" and sub["platform_fee_percent"] == 4.0
    assert sub["billing_period"] == "monthly"
    now = datetime.now(UTC)
    start = datetime.fromisoformat(sub["current_period_start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(sub["current_period_end"].replace("Z", "+00:00"))
    assert start == datetime(now.year, now.month, 1, tzinfo=UTC) and start <= now < end
    assert end.day == 1 and end.hour == 0 and (end - start).days in (28, 29, 30, 31)
    assert sub["usage_this_period_usd"] == 0.0
    assert sub["payment_method"] == {"type": "card", "last4": "4242", "brand": "visa"}

    pro = await gateway.runtime.storage.orgs.create("pro-org", plan="pro")
    mgmt = gateway.runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await gateway.runtime.storage.orgs.add_management_key(pro.id, mgmt)
    r = await gateway.client.get("/v1/billing/subscription", headers=gateway.auth(mgmt.value))
    assert (r.json()["plan"], r.json()["platform_fee_percent"]) == ("pro", 2.5)


async def test_the_refund_command_gives_back_a_test_processor_top_up(gateway: Gateway) -> None:
    r = await gateway.client.post(
        "/v1/credits/topup", json={"amount_usd": 20}, headers=gateway.auth()
    )
    assert r.status_code == 200
    txn_id = r.json()["transaction_id"]
    config = gateway.runtime.config
    assert await refund_command(config, txn_id, Decimal("5")) == 0
    assert await refund_command(config, txn_id, Decimal("15.01")) == 1  # more than is left
    assert await refund_command(config, txn_id, None) == 0  # the rest
    ledger = gateway.runtime.storage.ledger
    refunds, _ = await ledger.list(gateway.org_id, type="refund", limit=10, offset=0)
    assert sorted(t.amount_micros for t in refunds) == [-15_000_000, -5_000_000]
    assert {t.payment_ref for t in refunds} == {(await ledger.find(txn_id)).payment_ref}
    account = await ledger.account(gateway.org_id)
    assert account.balance_micros == 0 == await ledger.sum_rows(gateway.org_id)
