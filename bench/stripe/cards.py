"""Stripe's test payment-method tokens and how each card behaves. Pure.

A token (`pm_card_visa`) is accepted wherever a payment method id is; using it makes a new
`pm_...` with the same card. What a card does travels with every clone: `Behavior` says whether
attaching it is declined, whether every payment is, or whether a payment needs 3-D Secure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Behavior(enum.Enum):
    SUCCEEDS = "succeeds"
    DECLINED_ON_ATTACH = "declined_on_attach"  # attach and payments declined
    DECLINED_ON_CHARGE = "declined_on_charge"  # attaches; payments declined
    AUTHENTICATION = "authentication"  # attaches; 3-D Secure on every payment


@dataclass(frozen=True, slots=True)
class Card:
    brand: str
    last4: str
    behavior: Behavior
    decline_code: str = "generic_decline"
    funding: str = "credit"
    exp_month: int = 12
    exp_year: int = 2034


TOKENS: dict[str, Card] = {
    "pm_card_visa": Card("visa", "4242", Behavior.SUCCEEDS),
    "pm_card_mastercard": Card("mastercard", "4444", Behavior.SUCCEEDS),
    "pm_card_chargeDeclined": Card("visa", "0002", Behavior.DECLINED_ON_ATTACH),
    "pm_card_chargeDeclinedInsufficientFunds": Card(
        "visa", "9995", Behavior.DECLINED_ON_ATTACH, "insufficient_funds"
    ),
    "pm_card_chargeCustomerFail": Card("visa", "0341", Behavior.DECLINED_ON_CHARGE),
    "pm_card_authenticationRequired": Card("visa", "3184", Behavior.AUTHENTICATION),
}
