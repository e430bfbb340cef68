"""Money on the wire and at rest: USD floats in JSON, integer micro-dollars everywhere else."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

MICROS_PER_USD = 1_000_000


def usd_to_micros(amount: float | Decimal | int) -> int:
    """Exact conversion: a JSON float is read through its shortest repr (0.1 -> 100000)."""
    dec = amount if isinstance(amount, Decimal) else Decimal(str(amount))
    return int((dec * MICROS_PER_USD).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def micros_to_usd(micros: int) -> float:
    """For rendering only: the float nearest to the exact amount."""
    return float(Decimal(micros) / MICROS_PER_USD)
