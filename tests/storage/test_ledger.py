"""The credit ledger on every backend: atomic changes, batches, the balance = sum of rows."""

from __future__ import annotations

from datetime import datetime

import trio

from protocol.billing import ADJUSTMENT, TOPUP, USAGE, KeyBudget, day_of, month_of
from protocol.ids import new_id
from protocol.timefmt import from_datetime
from storage.ledger import UsageCharge
from storage.open import Storage


def charge(org_id: str, micros: int, *, key: str | None = "key_1", at: int = 0) -> UsageCharge:
    return UsageCharge(
        id=new_id("txn"),
        org_id=org_id,
        key_id=key,
        model="sim-small",
        request_id=f"req_{micros}",
        micros=micros,
        description="chat completion",
        created_at=at or from_datetime(datetime(2026, 11, 22, 12)),
    )


async def test_account_opens_at_zero_and_apply_keeps_balance_equal_to_rows(
    storage: Storage,
) -> None:
    org = await storage.orgs.create("acme")
    account = await storage.ledger.account(org.id)
    assert (account.balance_micros, account.lifetime_spend_micros) == (0, 0)
    assert account.auto_replenish is False
    first = await storage.ledger.apply(org.id, TOPUP, 10_000_000, "top-up")
    second = await storage.ledger.apply(org.id, ADJUSTMENT, -2_500_000, "correction")
    assert first.id.startswith("txn_") and first.balance_after_micros == 10_000_000
    assert second.balance_after_micros == 7_500_000
    assert (await storage.ledger.account(org.id)).balance_micros == 7_500_000
    assert await storage.ledger.sum_rows(org.id) == 7_500_000


async def test_concurrent_applies_lose_nothing(storage: Storage) -> None:
    org = await storage.orgs.create("acme")
    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(storage.ledger.apply, org.id, TOPUP, 1_000_000 + i, "top-up")
    expected = sum(1_000_000 + i for i in range(20))
    assert (await storage.ledger.account(org.id)).balance_micros == expected
    rows, total = await storage.ledger.list(org.id, limit=200, offset=0)
    assert total == 20
    # Each row's balance_after is the running sum in ledger order (newest first here).
    running = expected
    for row in rows:
        assert row.balance_after_micros == running
        running -= row.amount_micros
    assert running == 0


async def test_settle_writes_one_row_per_charge_and_walks_balances(storage: Storage) -> None:
    a = await storage.orgs.create("a")
    b = await storage.orgs.create("b")
    await storage.ledger.apply(a.id, TOPUP, 5_000_000, "top-up")
    settled = await storage.ledger.settle(
        [charge(a.id, 100), charge(b.id, 7, key="key_2"), charge(a.id, 250)]
    )
    assert settled.balances == {a.id: 5_000_000 - 350, b.id: -7}
    assert settled.key_spend == {
        ("key_1", "d:2026-11-22"): 350,
        ("key_1", "m:2026-11"): 350,
        ("key_2", "d:2026-11-22"): 7,
        ("key_2", "m:2026-11"): 7,
    }
    rows, total = await storage.ledger.list(a.id, type=USAGE, limit=10, offset=0)
    assert total == 2
    assert [(r.amount_micros, r.balance_after_micros) for r in rows] == [
        (-250, 4_999_650),
        (-100, 4_999_900),
    ]
    assert rows[0].model == "sim-small" and rows[0].request_id == "req_250"
    assert rows[0].key_id == "key_1"
    account = await storage.ledger.account(a.id)
    assert account.lifetime_spend_micros == 350
    for org in (a.id, b.id):
        assert (
            await storage.ledger.sum_rows(org) == (await storage.ledger.account(org)).balance_micros
        )


async def test_settle_counts_key_spend_per_utc_day_and_month(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    noon = from_datetime(datetime(2026, 11, 22, 12))
    yesterday = from_datetime(datetime(2026, 11, 21, 23, 59))
    await storage.ledger.settle(
        [
            charge(org.id, 10, at=noon),
            charge(org.id, 5, at=noon),
            charge(org.id, 3, at=yesterday),
            charge(org.id, 1, key=None, at=noon),
        ]
    )
    await storage.ledger.settle([charge(org.id, 100, at=noon)])
    spend = await storage.ledger.key_spend(["key_1", "key_9"], noon)
    assert spend == {"key_1": (115, 118), "key_9": (0, 0)}
    assert day_of(noon).label == "d:2026-11-22" and month_of(noon).label == "m:2026-11"


async def test_list_filters_by_type_and_dates_and_pages(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    for _ in range(3):
        await storage.ledger.apply(org.id, TOPUP, 5_000_000, "top-up")
    await storage.ledger.settle([charge(org.id, 1, at=1_000), charge(org.id, 2, at=2_000)])
    rows, total = await storage.ledger.list(org.id, type=TOPUP, limit=2, offset=0)
    assert total == 3 and len(rows) == 2
    rows, total = await storage.ledger.list(org.id, type=TOPUP, limit=2, offset=2)
    assert total == 3 and len(rows) == 1
    rows, total = await storage.ledger.list(org.id, start_us=1_500, end_us=3_000, limit=9, offset=0)
    assert total == 1 and rows[0].amount_micros == -2
    assert await storage.ledger.usage_between(org.id, 0, 3_000) == 3


async def test_update_settings(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    account = await storage.ledger.update_settings(
        org.id,
        {
            "auto_replenish": True,
            "replenish_amount_micros": 20_000_000,
            "replenish_threshold_micros": 5_000_000,
        },
    )
    assert account.auto_replenish is True
    assert account.replenish_amount_micros == 20_000_000
    assert account.replenish_threshold_micros == 5_000_000
    assert (await storage.ledger.update_settings(org.id, {})).auto_replenish is True


async def test_a_retried_settle_skips_charges_already_stored(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    first = [charge(org.id, 10), charge(org.id, 20)]
    await storage.ledger.settle(first)
    # The outcome of that flush was unknown to the caller: it retries with one more charge.
    await storage.ledger.settle([*first, charge(org.id, 5)], skip_stored=True)
    assert (await storage.ledger.account(org.id)).balance_micros == -35
    assert await storage.ledger.sum_rows(org.id) == -35
    _, total = await storage.ledger.list(org.id, limit=10, offset=0)
    assert total == 3


def budgeted(
    org_id: str, micros: int, at: int, *, daily: int | None, monthly: int | None
) -> UsageCharge:
    return UsageCharge(
        id=new_id("txn"),
        org_id=org_id,
        key_id="key_b",
        model="m",
        request_id="req_x",
        micros=micros,
        description="chat",
        created_at=at,
        budget=KeyBudget("key_b", "batch-jobs", daily, monthly),
    )


async def test_budget_thresholds_fire_once_each_per_period(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    noon = from_datetime(datetime(2026, 11, 22, 12))
    tomorrow = from_datetime(datetime(2026, 11, 23, 12))
    ledger = storage.ledger
    await ledger.settle([budgeted(org.id, 40, noon, daily=100, monthly=None)])  # 40 %
    await ledger.settle([budgeted(org.id, 45, noon, daily=100, monthly=None)])  # 85 %: 50, 80
    await ledger.settle([budgeted(org.id, 5, noon, daily=100, monthly=None)])  # 90 %: none
    await ledger.settle([budgeted(org.id, 20, noon, daily=100, monthly=None)])  # 110 %: 100
    await ledger.settle([budgeted(org.id, 60, tomorrow, daily=100, monthly=None)])  # 60 %: 50
    found = await storage.events.list_for_org(org.id)
    assert [e.type for e in found] == ["budget.threshold"] * 4
    assert [(e.data["threshold_percent"], e.data["period_end"]) for e in found] == [
        (50, "2026-11-23T00:00:00Z"),
        (80, "2026-11-23T00:00:00Z"),
        (100, "2026-11-23T00:00:00Z"),
        (50, "2026-11-24T00:00:00Z"),
    ]
    first = found[0].data
    assert first == {
        "key_id": "key_b",
        "key_name": "batch-jobs",
        "threshold_percent": 50,
        "period": "daily",
        "budget_usd": 0.0001,
        "spent_usd": 0.000085,
        "period_end": "2026-11-23T00:00:00Z",
    }


async def test_monthly_threshold_and_one_batch_crossing_several(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    noon = from_datetime(datetime(2026, 11, 22, 12))
    await storage.ledger.settle(
        [
            budgeted(org.id, 30, noon, daily=None, monthly=100),
            budgeted(org.id, 60, noon, daily=None, monthly=100),
        ]
    )
    found = await storage.events.list_for_org(org.id)
    assert [(e.data["threshold_percent"], e.data["period"]) for e in found] == [
        (50, "monthly"),
        (80, "monthly"),
    ]
    assert found[0].data["period_end"] == "2026-12-01T00:00:00Z"


async def test_exhausted_is_noted_once_per_period(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    budget = KeyBudget("key_b", "batch-jobs", 100, None)
    period = day_of(from_datetime(datetime(2026, 11, 22, 12)))
    assert await storage.ledger.note_exhausted(org.id, budget, period, 100, 98)
    assert not await storage.ledger.note_exhausted(org.id, budget, period, 100, 99)
    found = await storage.events.list_for_org(org.id)
    assert [e.type for e in found] == ["budget.exhausted"]
    assert found[0].data["threshold_percent"] == 100 and found[0].data["spent_usd"] == 0.000098
