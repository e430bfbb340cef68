"""The credits and billing wire types (credit account, top-up result, transaction,
subscription; docs/billing.md). Amounts are USD floats on the wire, integer micro-USD
everywhere else."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType

from protocol.labels import Label

Usd = Annotated[float, Meta(ge=0, le=1_000_000_000)]


class CreditAccount(msgspec.Struct, kw_only=True):
    balance_usd: float
    lifetime_spend_usd: float
    auto_replenish: bool
    replenish_amount_usd: float  # 0.0: not set
    replenish_threshold_usd: float  # 0.0: not set
    # Why auto-replenish was turned off (an automatic top-up declined); null otherwise.
    auto_replenish_failure: str | None = None


class CreditSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """PATCH /v1/credits: only included fields change. A replenish amount or threshold of 0
    or null clears it (it reads back as 0.0, and auto-replenish cannot be on without both)."""

    auto_replenish: bool | UnsetType = UNSET
    replenish_amount_usd: Usd | None | UnsetType = UNSET
    replenish_threshold_usd: Usd | None | UnsetType = UNSET


class TopupRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    amount_usd: Annotated[float, Meta(gt=0)]
    payment_method_id: Annotated[Label, Meta(min_length=1, max_length=255)] | None = None


class TopupResult(msgspec.Struct, kw_only=True):
    transaction_id: str
    amount_usd: float
    new_balance_usd: float
    created_at: str


class TransactionItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: str
    type: str
    amount_usd: float
    balance_after_usd: float
    description: str
    created_at: str
    model: str | None = None  # usage rows only
    request_id: str | None = None  # usage rows only


class TransactionList(msgspec.Struct, kw_only=True):
    data: list[TransactionItem]
    total: int
    has_more: bool


class PaymentMethodInfo(msgspec.Struct, kw_only=True):
    type: str
    last4: str
    brand: str


class Subscription(msgspec.Struct, kw_only=True):
    plan: str
    platform_fee_percent: float
    billing_period: str
    current_period_start: str
    current_period_end: str
    usage_this_period_usd: float
    payment_method: PaymentMethodInfo | None  # null: the organization has no default method


MethodId = Annotated[str, Meta(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_]+$")]


class PaymentMethodItem(msgspec.Struct, kw_only=True):
    id: str
    object: str = "payment_method"
    type: str
    brand: str
    last4: str
    exp_month: int | None = None
    exp_year: int | None = None
    is_default: bool


class PaymentMethodList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[PaymentMethodItem]
    has_more: bool = False


class AttachPaymentMethod(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """POST /v1/billing/payment_methods: a payment method collected with a SetupIntent (or a
    Stripe test token such as `pm_card_visa`); `default`: make it the default too."""

    payment_method_id: MethodId
    default: bool = False


class DeletedPaymentMethod(msgspec.Struct, kw_only=True):
    id: str
    object: str = "payment_method"
    deleted: bool = True


class SetupIntentBody(msgspec.Struct, kw_only=True):
    id: str
    object: str = "setup_intent"
    client_secret: str


class NoBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A POST that needs no body: none, or an empty object."""


class StripeEvent(msgspec.Struct, kw_only=True):
    """What Stripe posts to the webhook (documented; the route verifies the raw bytes)."""

    id: str
    object: str = "event"
    type: str
    created: int
    data: dict[str, Any]


class WebhookAck(msgspec.Struct, kw_only=True):
    received: bool = True
    duplicate: bool = False
