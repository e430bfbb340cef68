"""Money on the wire and at rest: USD floats in JSON, integer micro-dollars everywhere else."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Context, Decimal

MICROS_PER_USD = 1_000_000

# Enough digits to hold any finite double in micro-dollars exactly (the largest, 1.8e308, has
# 309 integer digits, 315 as micros): with the default 28, quantizing 1e22 USD or more raised
# decimal.InvalidOperation, a 500 on any route converting a client's amount. Limits are then
# checked on the exact integer.
_EXACT = Context(prec=330, rounding=ROUND_HALF_UP)
_UNIT = Decimal(1)
_MICROS = Decimal(MICROS_PER_USD)


def usd_to_micros(amount: float | Decimal | int) -> int:
    """Exact conversion: a JSON float is read through its shortest repr (0.1 -> 100000), half up
    to the micro-dollar. Any finite float converts; ValueError for an infinity or a NaN."""
    dec = amount if isinstance(amount, Decimal) else Decimal(str(amount))
    if not dec.is_finite():
        raise ValueError(f"not an amount of money: {amount!r}")
    return int(_EXACT.multiply(dec, _MICROS).quantize(_UNIT, context=_EXACT))


def micros_to_usd(micros: int) -> float:
    """For rendering only: the float nearest to the exact amount."""
    return float(Decimal(micros) / MICROS_PER_USD)


def format_usd(micros: int) -> str:
    """Exact, for messages: cents always, micro-dollars when there are any ("$0.000005",
    "$12.50", "-$0.001"); never rounds a non-zero amount to "$0.00"."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), MICROS_PER_USD)
    digits = f"{frac:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}${whole:,}.{digits}"
