"""Billing arithmetic: the integer tariff equals the exact Decimal computation."""

from __future__ import annotations

import random
from decimal import Decimal

from protocol.billing import FREE_TARIFF, charge_micros, reserve_micros, tariff
from protocol.pricing import token_cost_usd


def test_the_integer_tariff_matches_decimal_charges_and_reservations() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        price_in = Decimal(rng.randrange(0, 100_000_000)) / 10 ** rng.randrange(0, 7)
        price_out = Decimal(rng.randrange(0, 100_000_000)) / 10 ** rng.randrange(0, 7)
        fee = Decimal(rng.choice(["4", "2.5", "0", "12.3"]))
        prompt, completion = rng.randrange(0, 200_000), rng.randrange(0, 50_000)
        t = tariff(price_in, price_out, fee)
        assert t is not None
        cost = token_cost_usd(prompt, completion, price_in, price_out)
        assert t.charge_micros(prompt, completion) == charge_micros(cost, fee)
        assert t.reserve_micros(prompt, completion) == reserve_micros(cost, fee)


def test_half_a_micro_rounds_up_and_unrepresentable_prices_fall_back() -> None:
    t = tariff(Decimal("0.5"), None, Decimal(0))  # 0.5 micro-USD a token
    assert t is not None
    assert (t.charge_micros(1, 0), t.reserve_micros(1, 0)) == (1, 1)
    assert (t.charge_micros(3, 9), t.reserve_micros(3, 0)) == (2, 2)  # 1.5 -> 2
    assert tariff(Decimal("0.0000001"), None, Decimal(4)) is None
    assert tariff(Decimal(1), None, Decimal("2.55")) is None
    assert FREE_TARIFF.charge_micros(10**6, 10**6) == 0
