"""Keys' spend per UTC day and month, and the budget alerts it crosses (each claimed once):
written in the ledger's transactions (storage/ledger.py) and the fine-tuning charges'."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from protocol.billing import (
    DAY_US,
    KeyBudget,
    Period,
    day_of,
    month_of,
    period_name,
    thresholds_crossed,
)
from protocol.money import micros_to_usd
from protocol.timefmt import now_us, to_iso
from storage import events
from storage.database import Executor

if TYPE_CHECKING:
    from storage.ledger import UsageCharge


async def add_key_spend(tx: Executor, charges: Iterable[UsageCharge]) -> dict[tuple[str, str], int]:
    """Add the charges to their keys' spend for the UTC day and month of each, and write the
    budget.threshold events they cross (charges that carry a `budget`). The totals after."""
    per_day: dict[tuple[str, int], int] = defaultdict(int)  # (key, UTC day number): micros
    latest: dict[str, UsageCharge] = {}  # per key: its newest charge (org, name, budgets)
    for c in charges:
        if c.key_id is not None:
            latest[c.key_id] = c
            per_day[(c.key_id, c.created_at // DAY_US)] += c.micros
    added: dict[tuple[str, str], int] = defaultdict(int)
    periods: dict[str, Period] = {}
    for (key_id, day), micros in per_day.items():
        for period in (day_of(day * DAY_US), month_of(day * DAY_US)):
            periods[period.label] = period
            added[(key_id, period.label)] += micros
    totals: dict[tuple[str, str], int] = {}
    for (key_id, label), micros in added.items():
        total = int(
            await tx.fetchval(
                "INSERT INTO key_spend (key_id, period, micros)"
                " VALUES (:key_id, :period, :micros) ON CONFLICT (key_id, period)"
                " DO UPDATE SET micros = key_spend.micros + :micros RETURNING micros",
                {"key_id": key_id, "period": label, "micros": micros},
            )
        )
        totals[(key_id, label)] = total
        charge = latest[key_id]
        budget = charge.budget
        if budget is None:
            continue
        cap = budget.daily_micros if label.startswith("d:") else budget.monthly_micros
        if cap is None:
            continue
        for percent in thresholds_crossed(total - micros, total, cap):
            if await claim_alert(tx, key_id, label, str(percent)):
                await events.append(
                    tx,
                    charge.org_id,
                    "budget.threshold",
                    budget_event_data(budget, periods[label], cap, total, percent),
                )
    return totals


async def take_key_spend(tx: Executor, key_id: str, micros: int, at: int) -> None:
    """Take `micros` back from the key's spend for the UTC day and month of `at` (a refund of
    a charge counted then). Alerts already written stay written."""
    await tx.execute(
        "UPDATE key_spend SET micros = micros - :micros"
        " WHERE key_id = :key_id AND period IN (:day, :month)",
        {"micros": micros, "key_id": key_id, "day": day_of(at).label, "month": month_of(at).label},
    )


async def claim_alert(tx: Executor, key_id: str, label: str, kind: str) -> bool:
    """True the first time this alert is claimed (per key, period and kind), False after."""
    inserted = await tx.execute(
        "INSERT INTO budget_alerts (key_id, period, kind, created_at)"
        " VALUES (:key_id, :period, :kind, :now) ON CONFLICT DO NOTHING",
        {"key_id": key_id, "period": label, "kind": kind, "now": now_us()},
    )
    return inserted == 1


def budget_event_data(
    budget: KeyBudget, period: Period, cap: int, spent: int, percent: int | None
) -> dict[str, Any]:
    """`budget.threshold`'s data as the API fixes it (`budget.exhausted` carries the same
    fields, `threshold_percent` 100)."""
    return {
        "key_id": budget.key_id,
        "key_name": budget.key_name,
        "threshold_percent": 100 if percent is None else percent,
        "period": period_name(period.label),
        "budget_usd": micros_to_usd(cap),
        "spent_usd": micros_to_usd(spent),
        "period_end": to_iso(period.end_us),
    }
