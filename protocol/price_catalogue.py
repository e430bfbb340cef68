"""The shipped price list of well-known models, dated: used when a `[[models]]` entry gives no
price (or the model is addressed as `<provider>/<model>` without an entry). Prices in
`[[models]]` always win. Keyed by the provider's wire format (`kind`) and the upstream model
name, exactly as sent upstream. USD per million tokens, list prices on CATALOGUE_DATE."""

from __future__ import annotations

from decimal import Decimal

CATALOGUE_DATE = "2026-11-01"

# (kind, upstream model) -> (input, output or None for embeddings)
_PRICES: dict[tuple[str, str], tuple[str, str | None]] = {
    ("openai", "gpt-4o"): ("2.50", "10.00"),
    ("openai", "gpt-4o-mini"): ("0.15", "0.60"),
    ("openai", "gpt-4.1"): ("2.00", "8.00"),
    ("openai", "gpt-4.1-mini"): ("0.40", "1.60"),
    ("openai", "gpt-4.1-nano"): ("0.10", "0.40"),
    ("openai", "o3"): ("2.00", "8.00"),
    ("openai", "o3-mini"): ("1.10", "4.40"),
    ("openai", "o4-mini"): ("1.10", "4.40"),
    ("openai", "text-embedding-3-small"): ("0.02", None),
    ("openai", "text-embedding-3-large"): ("0.13", None),
    ("openai", "text-embedding-ada-002"): ("0.10", None),
    ("anthropic", "claude-3-haiku-20240307"): ("0.25", "1.25"),
    ("anthropic", "claude-3-5-haiku-latest"): ("0.80", "4.00"),
    ("anthropic", "claude-3-5-haiku-20241022"): ("0.80", "4.00"),
    ("anthropic", "claude-3-5-sonnet-latest"): ("3.00", "15.00"),
    ("anthropic", "claude-3-7-sonnet-latest"): ("3.00", "15.00"),
    ("anthropic", "claude-sonnet-4-0"): ("3.00", "15.00"),
    ("anthropic", "claude-sonnet-4-20250514"): ("3.00", "15.00"),
    ("anthropic", "claude-opus-4-0"): ("15.00", "75.00"),
    ("anthropic", "claude-opus-4-20250514"): ("15.00", "75.00"),
}


def catalogue_price(kind: str, upstream: str) -> tuple[Decimal, Decimal | None] | None:
    """(input, output) USD per million tokens, or None when the model is not listed."""
    found = _PRICES.get((kind, upstream))
    if found is None:
        return None
    return Decimal(found[0]), None if found[1] is None else Decimal(found[1])
