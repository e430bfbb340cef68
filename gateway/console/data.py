"""What the org-scoped pages show, read from storage and the accountant as the JSON routes read
them (gateway/keys/routes.py, gateway/usage/routes.py): keys with their spend, usage sums over
ranges, top keys and models."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from actors.accountant import Accountant
from protocol.money import micros_to_usd
from protocol.timefmt import from_datetime, now_us
from storage.keys import KeyRecord
from storage.open import Storage
from storage.usage import DAY_US, HOUR_US, UsageRow


@dataclass(frozen=True)
class KeyView:
    record: KeyRecord
    today_usd: float
    month_usd: float


@dataclass(frozen=True)
class Totals:
    requests: int
    errors: int
    input_tokens: int
    output_tokens: int
    cost_usd: float

    @classmethod
    def of(cls, rows: list[UsageRow]) -> Totals:
        return cls(
            requests=sum(r.requests for r in rows),
            errors=sum(r.errors for r in rows),
            input_tokens=sum(r.input_tokens for r in rows),
            output_tokens=sum(r.output_tokens for r in rows),
            cost_usd=micros_to_usd(sum(r.cost_micros for r in rows)),
        )


@dataclass(frozen=True)
class Ranked:
    """A key or a model with its sums, for the "top" tables."""

    name: str
    totals: Totals


async def keys_with_spend(storage: Storage, accountant: Accountant, org_id: str) -> list[KeyView]:
    records, _ = await storage.keys.list(org_id, active=None, limit=500, offset=0)
    now = now_us()
    stored = await storage.ledger.key_spend([k.id for k in records], now)
    out = []
    for key in records:
        today, month = accountant.key_spend(key.id, now, stored.get(key.id, (0, 0)))
        out.append(KeyView(key, micros_to_usd(today), micros_to_usd(month)))
    return out


def day_start(us: int) -> int:
    return us - us % DAY_US


def month_start(us: int) -> int:
    when = datetime.fromtimestamp(us / 1e6, UTC)
    return from_datetime(datetime(when.year, when.month, 1, tzinfo=UTC))


def hour_end(us: int) -> int:
    return (us // HOUR_US + 1) * HOUR_US


async def overview(storage: Storage, org_id: str) -> dict[str, object]:
    """Today's and this month's sums (UTC), and the month's top keys and models by spend."""
    now = now_us()
    end = hour_end(now)
    usage = storage.usage
    today = Totals.of(await usage.grouped(org_id, day_start(now), end, []))
    month_from = month_start(now)
    month = Totals.of(await usage.grouped(org_id, month_from, end, []))
    by_key = await usage.grouped(org_id, month_from, end, ["key_id"])
    by_model = await usage.grouped(org_id, month_from, end, ["model"])
    names = await key_names(storage, org_id)
    return {
        "today": today,
        "month": month,
        "top_keys": top(by_key, lambda r: names.get(r.key_id or "", r.key_id or "(none)")),
        "top_models": top(by_model, lambda r: r.model or "(unknown)"),
    }


async def key_names(storage: Storage, org_id: str) -> dict[str, str]:
    records, _ = await storage.keys.list(org_id, active=None, limit=1000, offset=0)
    return {k.id: k.name for k in records}


def top(rows: list[UsageRow], name: object, limit: int = 5) -> list[Ranked]:
    assert callable(name)
    ranked = sorted(rows, key=lambda r: (-r.cost_micros, -r.requests))[:limit]
    return [Ranked(str(name(r)), Totals.of([r])) for r in ranked]
