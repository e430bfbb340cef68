"""The 402 `budget_exceeded` message states every amount exactly (issue #20, item 13)."""

from __future__ import annotations

from protocol.budget_refusal import budget_exceeded_message


def test_sub_cent_amounts_are_never_rounded_away() -> None:
    message = budget_exceeded_message(
        period="daily",
        cap=1_000,
        committed=995,
        held=270,
        estimate=42,
        subject="this request",
        resets_at="2026-11-27T00:00:00Z",
    )
    assert message == (
        "This key's daily budget of $0.001 cannot hold this request: $0.000725 spent and"
        " $0.00027 held for requests in flight leave $0.000005, and this request is estimated"
        " at up to $0.000042. The budget resets at 2026-11-27T00:00:00Z."
    )


def test_spend_past_the_cap_leaves_nothing_and_an_unknown_split_is_one_figure() -> None:
    message = budget_exceeded_message(
        period="monthly",
        cap=5_000_000,
        committed=5_000_120,
        held=None,
        estimate=1_500,
        subject="the training hold",
        resets_at="2026-12-01T00:00:00Z",
    )
    assert "monthly budget of $5.00 cannot hold the training hold:" in message
    assert "$5.00012 spent or held for requests in flight leave $0.00," in message
    assert "estimated at up to $0.0015." in message
