"""The price of one image: `usd_per_image_by` ("size/quality" before "size"), then
`usd_per_image`. No I/O."""

from __future__ import annotations

from decimal import Decimal

from protocol.errors import invalid_request


def image_unit_price(
    by: tuple[tuple[str, Decimal], ...],
    default: Decimal | None,
    *,
    model: str,
    size: str,
    quality: str,
) -> Decimal:
    """The most specific price; 400 `model_price_unknown` when none applies."""
    prices = dict(by)
    for name in (f"{size}/{quality}", size):
        if name in prices:
            return prices[name]
    if default is not None:
        return default
    raise invalid_request(
        f"No price is configured for {size} {quality} images of the model {model!r}; add"
        " usd_per_image or a usd_per_image_by entry to its [[models]] entry.",
        param="size",
        code="model_price_unknown",
    )
