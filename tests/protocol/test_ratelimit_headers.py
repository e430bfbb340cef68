"""GCRA arithmetic and the rate-limit headers: pure functions, exact values."""

from __future__ import annotations

import pytest

from protocol.ratelimit_headers import (
    RateDecision,
    decision_headers,
    format_duration,
    gcra,
    gcra_params_us,
    gcra_us,
)


def _burst(rpm: int, now: float = 1000.0) -> tuple[list[RateDecision], float]:
    """Requests at one instant until the first refusal; the decisions and the final TAT."""
    tat = 0.0
    decisions: list[RateDecision] = []
    while not decisions or decisions[-1].allowed:
        decision, tat = gcra(tat, now, rpm)
        decisions.append(decision)
    return decisions, tat


def test_first_request_after_idle_is_admitted_with_exact_numbers() -> None:
    decision, tat = gcra(0.0, 100.0, 60)
    assert decision == RateDecision(
        allowed=True, limit=60, remaining=59, reset_s=1.0, retry_after_s=0.0
    )
    assert tat == 101.0


def test_a_burst_admits_rpm_then_refuses_with_retry_after_one_interval() -> None:
    decisions, tat = _burst(60, now=100.0)
    assert len(decisions) == 61
    assert [d.remaining for d in decisions[:60]] == list(range(59, -1, -1))
    assert [d.reset_s for d in decisions[:3]] == [1.0, 2.0, 3.0]
    assert decisions[-1] == RateDecision(
        allowed=False, limit=60, remaining=0, reset_s=60.0, retry_after_s=1.0
    )
    assert tat == 160.0


@pytest.mark.parametrize("rpm", [1, 2, 7, 13, 50, 60, 997, 7919, 20_011])
def test_a_burst_is_exactly_rpm_whatever_the_rounding(rpm: int) -> None:
    decisions, _ = _burst(rpm)
    assert sum(d.allowed for d in decisions) == rpm
    assert decisions[rpm - 1].remaining == 0


def test_a_refusal_leaves_the_tat_unchanged() -> None:
    decision, tat = gcra(160.0, 100.0, 60)
    assert not decision.allowed
    assert tat == 160.0


def test_after_a_burst_one_request_per_interval_is_admitted_not_earlier() -> None:
    _, tat = _burst(60, now=100.0)
    early, same = gcra(tat, 100.999999, 60)
    assert not early.allowed and same == tat
    assert early.retry_after_s == pytest.approx(1e-6)
    on_time, tat = gcra(tat, 101.0, 60)
    assert on_time.allowed and on_time.remaining == 0
    assert tat == 161.0


def test_a_tat_in_the_past_is_the_same_as_no_state() -> None:
    assert gcra(5.0, 100.0, 10) == gcra(0.0, 100.0, 10)


def test_remaining_counts_what_is_admissible_now_after_partial_refill() -> None:
    _, tat = _burst(60, now=100.0)  # TAT = 160
    decision, _ = gcra(tat, 110.5, 60)  # 10.5 s refilled 10 whole requests, this is one
    assert decision.allowed
    assert decision.remaining == 9
    assert decision.reset_s == pytest.approx(50.5)


def test_interval_is_rounded_to_the_microsecond_and_tolerance_is_rpm_minus_one_intervals() -> None:
    assert gcra_params_us(60) == (1_000_000, 59_000_000)
    assert gcra_params_us(7) == (8_571_429, 6 * 8_571_429)
    assert gcra_params_us(1) == (60_000_000, 0)
    # Keys may be given up to a billion rpm: the interval never rounds down to "no limit".
    assert gcra_params_us(1_000_000_000) == (1, 999_999_999)


def test_rpm_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="rpm"):
        gcra_us(0, 0, 0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (-3.0, "0s"),
        (0.0004, "1ms"),
        (0.25, "250ms"),
        (0.999, "999ms"),
        (1.0, "1s"),
        (1.5, "1.5s"),
        (8.571429, "8.572s"),
        (59.9999, "1m0s"),
        (360.0, "6m0s"),
        (3600.0, "1h0m0s"),
        (3723.25, "1h2m3.25s"),
    ],
)
def test_durations_are_in_openai_style_rounded_up_to_the_millisecond(
    seconds: float, text: str
) -> None:
    assert format_duration(seconds) == text


def test_headers_of_an_admitted_request_carry_no_retry_after() -> None:
    decision = RateDecision(allowed=True, limit=60, remaining=59, reset_s=1.0, retry_after_s=0.0)
    assert decision_headers(decision) == [
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "59"),
        ("x-ratelimit-reset-requests", "1s"),
    ]


@pytest.mark.parametrize(
    ("retry_after_s", "header"),
    [(0.0, "1"), (0.2, "1"), (1.0, "1"), (1.000001, "2"), (29.5, "30"), (30.0, "30")],
)
def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one(
    retry_after_s: float, header: str
) -> None:
    decision = RateDecision(
        allowed=False, limit=2, remaining=0, reset_s=60.0, retry_after_s=retry_after_s
    )
    assert decision_headers(decision) == [
        ("x-ratelimit-limit-requests", "2"),
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "1m0s"),
        ("retry-after", header),
    ]
