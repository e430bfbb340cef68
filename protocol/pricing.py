"""Price arithmetic, exact: Decimal USD per million tokens times token counts. No I/O."""

from __future__ import annotations

from decimal import Decimal

_MILLION = Decimal(1_000_000)


def token_cost_usd(
    prompt_tokens: int,
    completion_tokens: int,
    input_usd_per_mtok: Decimal,
    output_usd_per_mtok: Decimal | None,
) -> Decimal:
    cost = Decimal(prompt_tokens) * input_usd_per_mtok
    if output_usd_per_mtok is not None:
        cost += Decimal(completion_tokens) * output_usd_per_mtok
    return cost / _MILLION


def estimate_tokens(text_bytes: int) -> int:
    """A provider-neutral estimate (about 4 bytes a token) for when no usage was reported."""
    return max(1, -(-text_bytes // 4))
