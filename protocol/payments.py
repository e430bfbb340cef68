"""The payment processor interface behind top-ups, auto-replenish, refunds and payment methods
(no I/O here). Implementations: the built-in `test` processor (services/payments.py) and Stripe
(services/stripe/). docs/billing.md says which does what."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

TOPUP_KIND = "topup"
REPLENISH_KIND = "auto_replenish"
MICROS_PER_CENT = 10_000


def credit_id(reference: str) -> str:
    """The ledger row id of what a payment did to the balance (its credit, a refund, a
    dispute), from a reference stable across whoever writes it: a second write raises
    UniqueViolation, so each is written once."""
    return "txn_" + hashlib.sha256(reference.encode()).hexdigest()[:24]


def description(kind: str, card: str) -> str:
    """A payment's ledger row description: "Top-up (visa 4242)"."""
    return f"{'Auto top-up' if kind == REPLENISH_KIND else 'Top-up'} ({card})"


@dataclass(frozen=True, slots=True)
class PaymentMethod:
    id: str
    type: str
    brand: str
    last4: str
    exp_month: int | None = None
    exp_year: int | None = None

    @property
    def label(self) -> str:
        """How a ledger row names it: "visa 4242"."""
        return f"{self.brand} {self.last4}"


@dataclass(frozen=True, slots=True)
class Payment:
    """A charge that succeeded. `id`: the processor's (a Stripe PaymentIntent `pi_…`), which the
    ledger row carries; `credit_ref`: what the row's id is derived from (actors/charge_credit.py
    `credit_id`), the same whoever credits it (the request, a webhook, the reconciler)."""

    id: str
    credit_ref: str
    micros: int


@dataclass(frozen=True, slots=True)
class Refund:
    id: str  # the processor's (`re_…`): the refund row's id is derived from it
    payment_id: str
    micros: int


@dataclass(frozen=True, slots=True)
class SetupIntent:
    """What a client needs to collect a card with the processor's own page or SDK."""

    id: str
    client_secret: str


class PaymentProcessor(Protocol):
    name: str
    # True: a charge that succeeded is credited even when its request fails (the webhook and the
    # reconciler find it), so a failed top-up is never refunded to undo it (Stripe). False: the
    # top-up flow refunds what it could not credit (the test processor).
    reconciles: bool

    async def default_method(self, org_id: str) -> PaymentMethod | None:
        """The org's default payment method, None when it has none."""
        ...

    async def method(self, org_id: str, method_id: str) -> PaymentMethod:
        """One of the org's payment methods (or a processor test token). Raises
        UnknownPaymentMethod, PaymentUnavailable."""
        ...

    async def methods(self, org_id: str) -> list[PaymentMethod]:
        """The org's payment methods, default first when it has one."""
        ...

    async def attach(self, org_id: str, method_id: str) -> PaymentMethod:
        """Attach a payment method (a SetupIntent's) to the org; answers it (a test token is
        cloned into a new method). Raises UnknownPaymentMethod, PaymentDeclined."""
        ...

    async def set_default(self, org_id: str, method_id: str) -> PaymentMethod:
        """Raises UnknownPaymentMethod (not one of the org's)."""
        ...

    async def detach(self, org_id: str, method_id: str) -> None:
        """Raises UnknownPaymentMethod (not one of the org's)."""
        ...

    async def setup_intent(self, org_id: str) -> SetupIntent: ...

    async def charge(
        self,
        org_id: str,
        method: PaymentMethod,
        micros: int,
        reference: str,
        *,
        kind: str = TOPUP_KIND,
        off_session: bool = False,
    ) -> Payment:
        """Take `micros` from the method. `reference` is stable across retries of one top-up:
        the processor's idempotency key, so a retry never charges twice. Raises PaymentDeclined,
        PaymentRequiresAction (on session only), PaymentUnavailable."""
        ...

    async def refund(self, org_id: str, reference: str) -> None:
        """Undo the charge made with `reference`, if one was made and not refunded (idempotent;
        only processors that do not reconcile are asked). A later `charge` with the same
        reference is a new charge."""
        ...

    async def refund_payment(self, payment_id: str, micros: int | None, key: str) -> Refund:
        """Refund `micros` (None: all that is left) of a payment; `key` is the idempotency key.
        Raises PaymentDeclined (nothing left to refund), PaymentUnavailable."""
        ...
