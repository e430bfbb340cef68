"""The rule for what a secret key with `keys:manage` may grant (protocol/key_grants.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from protocol.errors import APIError
from protocol.key_grants import (
    ESCALATION,
    WIDER_KEY,
    KeyLimits,
    check_change,
    check_create,
    excess,
    inherit,
)

UNLIMITED = KeyLimits()
BOUND = KeyLimits(
    scopes=("keys:manage", "chat:completions"),
    allowed_models=("gpt-4o-mini",),
    rate_limit_rpm=60,
    daily_budget_micros=10_000_000,
    monthly_budget_micros=100_000_000,
    expires_at=2_000_000_000_000_000,
)


def test_an_unlimited_bound_allows_anything() -> None:
    assert excess(UNLIMITED, UNLIMITED) is None
    assert excess(UNLIMITED, BOUND) is None


def test_a_key_is_within_itself_and_anything_narrower() -> None:
    assert excess(BOUND, BOUND) is None
    narrower = KeyLimits(
        scopes=("chat:completions",),
        allowed_models=(),
        rate_limit_rpm=1,
        daily_budget_micros=0,
        monthly_budget_micros=5,
        expires_at=1,
    )
    assert excess(BOUND, narrower) is None


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"scopes": None}, "scopes"),
        ({"scopes": ("chat:completions", "billing:write")}, "scopes"),
        ({"allowed_models": None}, "allowed_models"),
        ({"allowed_models": ("gpt-4o-mini", "gpt-4o")}, "allowed_models"),
        ({"rate_limit_rpm": None}, "rate_limit_rpm"),
        ({"rate_limit_rpm": 61}, "rate_limit_rpm"),
        ({"daily_budget_micros": None}, "daily_budget_usd"),
        ({"daily_budget_micros": 10_000_001}, "daily_budget_usd"),
        ({"monthly_budget_micros": None}, "monthly_budget_usd"),
        ({"monthly_budget_micros": 100_000_001}, "monthly_budget_usd"),
        ({"expires_at": None}, "expires_at"),
        ({"expires_at": 2_000_000_000_000_001}, "expires_at"),
    ],
)
def test_each_field_wider_than_the_bound_is_named(change: dict[str, object], param: str) -> None:
    found = excess(BOUND, replace(BOUND, **change))
    assert found is not None and found.param == param
    with pytest.raises(APIError) as raised:
        check_create(BOUND, replace(BOUND, **change))
    assert raised.value.status == 403 and raised.value.code == ESCALATION
    assert raised.value.param == param and raised.value.type == "permission_error"


def test_the_message_names_what_is_not_held() -> None:
    found = excess(BOUND, replace(BOUND, scopes=("chat:completions", "billing:write")))
    assert found is not None and "'billing:write'" in found.detail
    found = excess(BOUND, replace(BOUND, daily_budget_micros=12_500_000))
    assert found is not None and "12.5 USD" in found.detail and "10 USD" in found.detail


def test_inherit_fills_every_left_out_limit_with_the_creators() -> None:
    settings = inherit(BOUND, {"name": "child", "rate_limit_rpm": 10, "scopes": None})
    assert settings == {
        "name": "child",
        "scopes": BOUND.scopes,
        "allowed_models": BOUND.allowed_models,
        "rate_limit_rpm": 10,
        "daily_budget_micros": BOUND.daily_budget_micros,
        "monthly_budget_micros": BOUND.monthly_budget_micros,
        "expires_at": BOUND.expires_at,
    }
    assert excess(BOUND, KeyLimits.of(settings)) is None
    assert inherit(UNLIMITED, {"name": "x"})["scopes"] is None  # all scopes, as before


def test_a_change_must_start_and_end_within_the_caller() -> None:
    narrower = replace(BOUND, rate_limit_rpm=10)
    check_change(BOUND, narrower, replace(narrower, rate_limit_rpm=60))
    check_change(BOUND, narrower, None)  # delete
    with pytest.raises(APIError) as raised:
        check_change(BOUND, narrower, replace(narrower, rate_limit_rpm=None))
    assert raised.value.code == ESCALATION and raised.value.param == "rate_limit_rpm"
    wider = replace(BOUND, scopes=None)
    for after in (None, replace(wider, rate_limit_rpm=1), BOUND):
        with pytest.raises(APIError) as raised:
            check_change(BOUND, wider, after)
        assert raised.value.status == 403
        assert raised.value.code == WIDER_KEY and raised.value.param == "scopes"


def test_a_key_cannot_widen_itself() -> None:
    for field in ("scopes", "allowed_models", "rate_limit_rpm", "expires_at"):
        with pytest.raises(APIError):
            check_change(BOUND, BOUND, replace(BOUND, **{field: None}))
    check_change(BOUND, BOUND, replace(BOUND, rate_limit_rpm=30))  # narrowing is fine


def test_only_a_management_key_enables_a_disabled_key() -> None:
    narrower = replace(BOUND, rate_limit_rpm=10)
    check_change(BOUND, narrower, narrower)  # disabling, or any change that enables nothing
    with pytest.raises(APIError) as raised:
        check_change(BOUND, narrower, narrower, enables=True)
    assert raised.value.code == ESCALATION and raised.value.param == "is_active"
