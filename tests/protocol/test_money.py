"""USD amounts to integer micro-dollars: exact through the float's shortest repr, half up, and
total over every finite float (huge ones were decimal.InvalidOperation, a 500)."""

from __future__ import annotations

import sys
from decimal import Decimal

import pytest

from protocol.money import format_usd, micros_to_usd, usd_to_micros


@pytest.mark.parametrize(
    ("amount", "micros"),
    [
        (0.1, 100_000),
        (25.5, 25_500_000),
        (-0.0, 0),
        (5e-324, 0),
        (5e-7, 1),  # half up
        (2.5e-6, 3),
        (Decimal("-3.5e-6"), -4),  # half away from zero
        (100_000.0000004, 100_000_000_000),
        (1e22, 10**28),
        (123456789012345678901234, 123456789012345678901234 * 10**6),
    ],
)
def test_exact_conversion(amount: float | Decimal | int, micros: int) -> None:
    assert usd_to_micros(amount) == micros


def test_the_largest_float_converts_exactly() -> None:
    # Through its shortest repr, 1.7976931348623157e308, like every float.
    assert usd_to_micros(sys.float_info.max) == 17976931348623157 * 10 ** (308 - 16 + 6)


@pytest.mark.parametrize("amount", [float("inf"), float("-inf"), float("nan"), Decimal("NaN")])
def test_non_finite_amounts_are_value_errors(amount: float | Decimal) -> None:
    with pytest.raises(ValueError, match="not an amount of money"):
        usd_to_micros(amount)


def test_rendering_round_trips() -> None:
    assert micros_to_usd(usd_to_micros(0.1)) == 0.1


@pytest.mark.parametrize(
    ("micros", "text"),
    [
        (0, "$0.00"),
        (1, "$0.000001"),
        (5, "$0.000005"),
        (1_000, "$0.001"),
        (10_000, "$0.01"),
        (12_500_000, "$12.50"),
        (1_234_567_890_123, "$1,234,567.890123"),
        (-1_000, "-$0.001"),
    ],
)
def test_format_usd_is_exact(micros: int, text: str) -> None:
    assert format_usd(micros) == text
