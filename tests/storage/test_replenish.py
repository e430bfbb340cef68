"""The auto-replenish claim in the database (storage/replenish.py), on both backends: the daily
cap holds however many claims race for it, and a due top-up stops being due once the balance
is back above the threshold."""

from __future__ import annotations

import trio

from protocol.billing import ADJUSTMENT, TOPUP, day_of
from protocol.timefmt import now_us
from storage.open import Storage

AMOUNT, THRESHOLD = 20_000_000, 5_000_000


async def org_with_replenish(storage: Storage, balance: int) -> str:
    org = await storage.orgs.create("acme")
    await storage.ledger.apply(org.id, TOPUP, balance, "top-up")
    await storage.ledger.update_settings(
        org.id,
        {
            "auto_replenish": True,
            "replenish_amount_micros": AMOUNT,
            "replenish_threshold_micros": THRESHOLD,
        },
    )
    return org.id


async def due(storage: Storage, org: str) -> bool:
    value = await storage.db.fetchval(
        "SELECT replenish_due FROM credit_accounts WHERE org_id = :org", {"org": org}
    )
    return bool(value)


async def test_racing_claims_never_pass_the_daily_cap(storage: Storage) -> None:
    org = await org_with_replenish(storage, 1_000_000)  # switched on below: due
    won: list[int] = []

    async def claim() -> None:
        # No claim counts as in flight (stale at once): only `replenish_due` and the day's
        # count decide, in one conditional UPDATE.
        result = await storage.ledger.claim_replenish(
            org, now_us(), stale_after_us=0, retry_after_us=0, max_per_day=2
        )
        if result.amount is not None:
            won.append(result.amount)

    for _ in range(4):  # four crossings in a day, each raced by eight claims
        await storage.db.execute(
            "UPDATE credit_accounts SET replenish_due = TRUE WHERE org_id = :org", {"org": org}
        )
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(claim)
    assert won == [AMOUNT, AMOUNT]
    row = await storage.db.fetchrow(
        "SELECT auto_topup_day, auto_topup_count, auto_topup_limited_day FROM credit_accounts"
        " WHERE org_id = :org",
        {"org": org},
    )
    assert row is not None
    today = day_of(now_us()).label
    assert (row["auto_topup_day"], row["auto_topup_count"]) == (today, 2)
    assert row["auto_topup_limited_day"] == today
    limited = [
        e
        for e in await storage.events.list_for_org(org, limit=100)
        if e.type == "billing.auto_topup_limited"
    ]
    assert len(limited) == 1  # once a day, however many claims found the cap used up


async def test_a_balance_back_above_the_threshold_clears_a_due_top_up(storage: Storage) -> None:
    org = await org_with_replenish(storage, 6_000_000)
    assert not await due(storage, org)
    await storage.ledger.apply(org, ADJUSTMENT, -2_000_000, "correction")  # 6 → 4: crossed
    assert await due(storage, org)
    await storage.ledger.apply(org, ADJUSTMENT, -1_000_000, "correction")  # still below
    assert await due(storage, org)
    await storage.ledger.apply(org, TOPUP, 10_000_000, "manual top-up")  # 3 → 13: above
    assert not await due(storage, org)
    result = await storage.ledger.claim_replenish(
        org, now_us(), stale_after_us=0, retry_after_us=0, max_per_day=3
    )
    assert result.amount is None and result.limited is None
