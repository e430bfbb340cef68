"""Auto-replenish's claim, in the database so it holds across instances.

A top-up is due when a usage write took the balance from above the threshold to at or below it,
or when auto-replenish was switched on (or its settings changed) at or below it:
`credit_accounts.replenish_due`, set in that write's transaction. A claim takes it (one winner:
a single conditional UPDATE) and counts it against the org's automatic top-ups of the UTC day,
`auto_topup_day`/`auto_topup_count`, in the same statement, so the cap is exact whatever the
number of instances. A due top-up over the cap stays due (it is claimed the next day, at the
first usage write) and writes `billing.auto_topup_limited` once per org and day.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.billing import day_of
from protocol.money import micros_to_usd
from storage import events
from storage.database import Executor

LIMITED_EVENT = "billing.auto_topup_limited"

# Switched on, configured, and the balance at or below the threshold.
_DUE = (
    "auto_replenish AND replenish_amount_micros IS NOT NULL"
    " AND replenish_threshold_micros IS NOT NULL"
    " AND balance_micros <= replenish_threshold_micros"
)

# For every UPDATE that takes `:total` from the balance (negative: adds), old values on the
# right-hand side on both backends: a crossing downwards makes a top-up due; a balance left
# above the threshold (a manual top-up) makes none due, so no flush asks for a claim that
# cannot succeed.
CROSSED = (
    "replenish_due = CASE WHEN NOT auto_replenish OR replenish_threshold_micros IS NULL"
    " THEN replenish_due"
    " WHEN balance_micros - :total > replenish_threshold_micros THEN FALSE"
    " WHEN balance_micros > replenish_threshold_micros THEN TRUE ELSE replenish_due END"
)


# Automatic top-ups the org claimed on the UTC day `:day` (0 on a new day, or never).
_TODAY = "(CASE WHEN auto_topup_day = :day THEN auto_topup_count ELSE 0 END)"


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim's outcome: `amount` to charge (None: nothing to do now); `capped`: a top-up is
    due but the day's cap is used up (the caller need not ask again that day); `limited`: this
    claim wrote the day's `billing.auto_topup_limited` (its data), so the caller logs it once."""

    amount: int | None
    capped: bool = False
    limited: dict[str, Any] | None = None


async def claim(
    tx: Executor,
    org_id: str,
    now: int,
    *,
    stale_after_us: int,
    retry_after_us: int,
    max_per_day: int,
) -> Claim:
    """The amount to charge, or none: not due, another claim younger than `stale_after_us`, a
    failure younger than `retry_after_us`, or the day's cap reached (then the event, once)."""
    day = day_of(now).label
    value = await tx.fetchval(
        "UPDATE credit_accounts SET replenish_claimed_at = :now, replenish_due = FALSE,"
        f" auto_topup_count = {_TODAY} + 1, auto_topup_day = :day"
        f" WHERE org_id = :org_id AND replenish_due AND {_DUE}"
        " AND (replenish_claimed_at IS NULL OR replenish_claimed_at < :stale)"
        " AND (replenish_failed_at IS NULL OR replenish_failed_at < :retry)"
        f" AND {_TODAY} < :cap"
        " RETURNING replenish_amount_micros",
        {
            "now": now,
            "day": day,
            "org_id": org_id,
            "stale": now - stale_after_us,
            "retry": now - retry_after_us,
            "cap": max_per_day,
        },
    )
    if value is not None:
        return Claim(int(value))
    capped = await tx.fetchval(
        f"SELECT 1 FROM credit_accounts WHERE org_id = :org_id AND replenish_due AND {_DUE}"
        f" AND {_TODAY} >= :cap",
        {"day": day, "org_id": org_id, "cap": max_per_day},
    )
    if capped is None:
        return Claim(None)
    row = await tx.fetchrow(  # the day's event, once across instances
        "UPDATE credit_accounts SET auto_topup_limited_day = :day"
        f" WHERE org_id = :org_id AND {_DUE}"
        " AND (auto_topup_limited_day IS NULL OR auto_topup_limited_day <> :day)"
        " RETURNING balance_micros, replenish_amount_micros, replenish_threshold_micros",
        {"day": day, "org_id": org_id},
    )
    if row is None:
        return Claim(None, capped=True)
    data = limited_data(
        day,
        max_per_day,
        int(row["balance_micros"]),
        int(row["replenish_threshold_micros"]),
        int(row["replenish_amount_micros"]),
    )
    await events.append(tx, org_id, LIMITED_EVENT, data)
    return Claim(None, capped=True, limited=data)


def limited_data(
    day: str, max_per_day: int, balance: int, threshold: int, amount: int
) -> dict[str, Any]:
    """`billing.auto_topup_limited`'s data."""
    return {
        "day": day.removeprefix("d:"),
        "max_auto_topups_per_day": max_per_day,
        "balance_usd": micros_to_usd(balance),
        "threshold_usd": micros_to_usd(threshold),
        "amount_usd": micros_to_usd(amount),
    }


async def rearm(tx: Executor, org_id: str) -> None:
    """After a settings change: due exactly when the new settings find the balance at or below
    the threshold (switching on below it tops up once; no crossing is needed)."""
    await tx.execute(
        f"UPDATE credit_accounts SET replenish_due = ({_DUE}) WHERE org_id = :org_id",
        {"org_id": org_id},
    )
