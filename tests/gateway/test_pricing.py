"""Pricing of one model on one plan: the integer tariff, the exact Decimal fallback, the cache."""

from __future__ import annotations

from decimal import Decimal

from gateway.config.schema import ModelConfig
from gateway.inference.billing import Pricing, UnitPricing, pricing_for
from protocol.billing import charge_micros, reserve_micros
from protocol.pricing import token_cost_usd


def test_prices_finer_than_the_tariff_are_charged_exactly_in_decimal() -> None:
    prices = (Decimal("0.1234567"), Decimal("0.3333333"))  # 7 decimals: no integer tariff
    pricing = Pricing(prices, Decimal(4))
    cost = token_cost_usd(1_234_567, 7_654_321, *prices)
    assert pricing.charge(1_234_567, 7_654_321) == charge_micros(cost, Decimal(4)) == 2_812_010
    assert pricing.most(1_234_567, 7_654_321) == reserve_micros(cost, Decimal(4))


def test_the_own_key_pricing_charges_nothing() -> None:
    assert Pricing(None, Decimal(0)).charge(10**6, 10**6) == 0


def test_pricing_is_shared_by_configs_with_the_same_prices_and_plan() -> None:
    one = ModelConfig("a", "p", "m", Decimal("0.15"), Decimal("0.6"))
    two = ModelConfig("openai/m", "p", "m", Decimal("0.15"), Decimal("0.6"))  # made per request
    assert pricing_for(one, "free") is pricing_for(two, "free")
    assert pricing_for(one, "pro") is not pricing_for(one, "free")
    assert pricing_for(one, "free").charge(1_000_000, 0) == 156_000  # 0.15 × 1.04
    assert pricing_for(one, "pro").charge(1_000_000, 0) == 153_750  # 0.15 × 1.025


def test_unit_pricing_is_exact_and_rounded_once() -> None:
    # 1,234 characters at $0.015 per 1,000, plus the Free plan's 4%: 0.0192504 USD.
    pricing = UnitPricing(Decimal("0.015"), Decimal(4))
    units = Decimal(1234) / 1000
    assert pricing.charge(units) == 19_250  # half up from 19,250.4
    assert pricing.most(units) == 19_251  # a hold rounds up
    assert pricing.charge(Decimal(0)) == 0
    # A transcription of 61.5 s at $0.006 per minute on Pro (2.5%): 6,303.75 micro-USD.
    minutes = Decimal("61.5") / 60
    assert UnitPricing(Decimal("0.006"), Decimal("2.5")).charge(minutes) == 6_304
