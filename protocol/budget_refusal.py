"""The 402 `budget_exceeded` message: every amount exact (protocol/money.py `format_usd`), so a
sub-cent budget never reads "$0.00" (issue #20)."""

from __future__ import annotations

from protocol.money import format_usd


def budget_exceeded_message(
    *,
    period: str,
    cap: int,
    committed: int,
    held: int | None,
    estimate: int,
    subject: str,
    resets_at: str,
) -> str:
    """`period` is "daily" or "monthly"; `committed` what the check counted before this request
    (spent, settled and not yet written, held), `held` the part held for requests in flight
    (None: not known apart, as with the shared holds in Redis); `estimate` what `subject`
    ("this request", "the training hold") would hold."""
    if held is None:
        counted = f"{format_usd(committed)} spent or held for requests in flight"
    else:
        counted = (
            f"{format_usd(committed - held)} spent and {format_usd(held)} held for requests"
            " in flight"
        )
    left = format_usd(max(cap - committed, 0))
    return (
        f"This key's {period} budget of {format_usd(cap)} cannot hold {subject}: {counted}"
        f" leave {left}, and {subject} is estimated at up to {format_usd(estimate)}."
        f" The budget resets at {resets_at}."
    )
