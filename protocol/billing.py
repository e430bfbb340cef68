"""Billing arithmetic, exact and without I/O: platform fees, charges, periods, top-up limits.

A request's charge is its provider cost times (1 + the plan's platform fee), in integer
micro-USD rounded half up once per request (docs/decisions.md, "charges").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from functools import lru_cache

from protocol.money import MICROS_PER_USD
from protocol.timefmt import from_datetime

PLATFORM_FEE_PERCENT: dict[str, Decimal] = {"free": Decimal(4), "pro": Decimal("2.5")}
BYOK_FEE_PERCENT = Decimal(0)

TOPUP = "topup"
USAGE = "usage"
REFUND = "refund"
ADJUSTMENT = "adjustment"
TRANSACTION_TYPES = (TOPUP, USAGE, REFUND, ADJUSTMENT)

MIN_TOPUP_MICROS = 5 * MICROS_PER_USD
MAX_TOPUP_MICROS = 100_000 * MICROS_PER_USD  # one charge; larger amounts are split or invoiced


def fee_percent(plan: str, *, byok: bool = False) -> Decimal:
    return BYOK_FEE_PERCENT if byok else PLATFORM_FEE_PERCENT[plan]


def charge_micros(cost_usd: Decimal, fee: Decimal) -> int:
    """cost × (1 + fee/100) in micro-USD, rounded half up to the micro-dollar."""
    exact = cost_usd * (1 + fee / 100) * MICROS_PER_USD
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))


@dataclass(frozen=True, slots=True)
class Period:
    """A UTC calendar period: [start, end) in epoch microseconds, and its storage label."""

    label: str  # "d:2026-11-22" or "m:2026-11"
    start_us: int
    end_us: int


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _utc(now_us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=now_us)  # exact, unlike a float timestamp


DAY_US = 86_400 * 1_000_000


def day_of(now_us: int) -> Period:
    return _day(now_us // DAY_US)  # cached per day: this runs for every charge


def month_of(now_us: int) -> Period:
    return _month(now_us // DAY_US)


@lru_cache(maxsize=64)
def _day(day_index: int) -> Period:
    start = _utc(day_index * DAY_US)
    start_us = from_datetime(start)
    return Period(f"d:{start:%Y-%m-%d}", start_us, from_datetime(start + timedelta(days=1)))


@lru_cache(maxsize=64)
def _month(day_index: int) -> Period:
    dt = _utc(day_index * DAY_US)
    start = datetime(dt.year, dt.month, 1, tzinfo=UTC)
    end = datetime(dt.year + dt.month // 12, dt.month % 12 + 1, 1, tzinfo=UTC)
    return Period(f"m:{start:%Y-%m}", from_datetime(start), from_datetime(end))


def reserve_micros(cost_usd: Decimal, fee: Decimal) -> int:
    """What to hold for a request whose cost is at most `cost_usd`: rounded up, so a priced
    request always holds something."""
    exact = cost_usd * (1 + fee / 100) * MICROS_PER_USD
    return int(exact.to_integral_value(rounding=ROUND_CEILING))


THRESHOLD_PERCENTS = (50, 80, 100)
EXHAUSTED = "exhausted"


@dataclass(frozen=True, slots=True)
class KeyBudget:
    """A secret key's caps as they were when its request was admitted (None: no cap)."""

    key_id: str
    key_name: str
    daily_micros: int | None
    monthly_micros: int | None

    @property
    def capped(self) -> bool:
        return self.daily_micros is not None or self.monthly_micros is not None


def thresholds_crossed(before: int, after: int, cap: int) -> list[int]:
    """The percentages of `cap` that spending from `before` to `after` reached."""
    return [p for p in THRESHOLD_PERCENTS if before * 100 < cap * p <= after * 100]


def period_name(label: str) -> str:
    return "daily" if label.startswith("d:") else "monthly"


_PRICE_SCALE = 1_000_000  # prices known to 1e-6 USD per million tokens
_DIVISOR = _PRICE_SCALE * 1000  # × the fee in permille


@dataclass(frozen=True, slots=True)
class Tariff:
    """A model's token prices with a plan's fee, as integers: the hot path's charge and
    reservation without Decimal, equal to `charge_micros` / `reserve_micros` of the Decimal
    cost (checked against them in tests/protocol/test_billing.py)."""

    input_units: int  # USD per million tokens × 1e6
    output_units: int
    fee_factor: int  # 1000 + fee in permille (4 % -> 1040)

    def charge_micros(self, prompt_tokens: int, completion_tokens: int) -> int:
        """Rounded half up, as `charge_micros`."""
        cost = prompt_tokens * self.input_units + completion_tokens * self.output_units
        return (cost * self.fee_factor + _DIVISOR // 2) // _DIVISOR

    def reserve_micros(self, prompt_tokens: int, completion_tokens: int) -> int:
        """Rounded up, as `reserve_micros`."""
        cost = prompt_tokens * self.input_units + completion_tokens * self.output_units
        return -(-cost * self.fee_factor // _DIVISOR)


FREE_TARIFF = Tariff(0, 0, 1000)


@lru_cache(maxsize=4096)
def tariff(input_usd: Decimal, output_usd: Decimal | None, fee: Decimal) -> Tariff | None:
    """The integer tariff, or None when a price has more than 6 decimals or the fee more
    than 1 (then the Decimal functions above apply)."""
    units = [value * _PRICE_SCALE for value in (input_usd, output_usd or Decimal(0))]
    permille = fee * 10
    if any(u != u.to_integral_value() for u in (*units, permille)):
        return None
    return Tariff(int(units[0]), int(units[1]), 1000 + int(permille))
