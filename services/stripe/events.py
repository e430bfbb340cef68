"""What Stripe's events do to the ledger (POST /v1/billing/stripe/webhook, docs/billing.md):

- `payment_intent.succeeded`: credit the gateway's PaymentIntent (a 3-D Secure top-up finished,
  or one whose request failed after Stripe took the money);
- `payment_intent.payment_failed`: an automatic top-up declined turns auto-replenish off;
- `charge.refunded`: each refund of the charge (listed from Stripe: the event's charge says only
  how much in all) becomes a `refund` row;
- `charge.dispute.created` / `charge.dispute.closed` (won): an `adjustment` row taking the
  disputed amount off, and one giving it back.

Every effect is written once (services/payment_ledger.py), and the event's id is recorded once
handled, so a second delivery changes nothing. An object that is not the gateway's (no
reference in its metadata, or a customer that is no organization's) is acknowledged and left
alone. Raises PaymentUnavailable when Stripe must be asked and cannot be: the webhook then
answers 503 and Stripe delivers the event again later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from protocol.payments import MICROS_PER_CENT, REPLENISH_KIND
from services.payment_ledger import (
    Credit,
    credit_payment,
    record_dispute,
    record_refund,
    replenish_failed,
)
from services.stripe.objects import (
    SUCCEEDED,
    GatewayPayment,
    charge_ref,
    dispute,
    gateway_payment,
)
from services.stripe.processor import PROVIDER, StripeProcessor
from storage.open import Storage

log = logging.getLogger(__name__)

HANDLED = (
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "charge.refunded",
    "charge.dispute.created",
    "charge.dispute.closed",
)


class StripeEvents:
    def __init__(
        self,
        storage: Storage,
        processor: StripeProcessor,
        credit: Credit,
        changed: Callable[[str], None],
    ) -> None:
        self._storage = storage
        self._stripe = processor
        self._credit = credit
        self._changed = changed  # the accountant's `refresh`: an account's settings changed

    async def handle(self, event: Mapping[str, Any]) -> str:
        """Apply one verified event (once per event id); answers what it did, for the log."""
        event_id, type = str(event.get("id") or ""), str(event.get("type") or "")
        if not event_id.startswith("evt_"):
            return "ignored: no event id"
        if await self._storage.payments.seen(event_id):
            return "duplicate"
        data = event.get("data")
        obj = data.get("object") if isinstance(data, Mapping) else None
        outcome = "ignored"
        if type in HANDLED and isinstance(obj, Mapping):
            outcome = await self._apply(type, obj)
        await self._storage.payments.handled(event_id, type)
        return outcome

    async def _apply(self, type: str, obj: Mapping[str, Any]) -> str:
        if type.startswith("payment_intent."):
            payment = gateway_payment(obj)
            if payment is None or not await self._owned(payment.customer, payment.org_id):
                return "ignored: not the gateway's payment"
            if type == "payment_intent.succeeded":
                return await self.succeeded(payment)
            return await self._failed(payment, obj)
        if type == "charge.refunded":
            ref = charge_ref(obj)
            # A refund counts only against a payment the gateway credited: its own PaymentIntent.
            paid = None if ref is None else await self._stripe.payment(ref.payment_intent)
            if ref is None or paid is None or not await self._owned(paid.customer, paid.org_id):
                return "ignored: not the gateway's charge"
            written = 0
            for refund in await self._stripe.refunds_of(ref.charge):
                named = replace(refund, payment_id=paid.id)
                _, new = await record_refund(self._storage.ledger, self._credit, paid.org_id, named)
                written += new
            return f"{written} refund row(s)"
        found = dispute(obj)
        if found is None or found.payment_intent is None:
            return "ignored: malformed dispute"
        payment = await self._stripe.payment(found.payment_intent)
        if payment is None or not await self._owned(payment.customer, payment.org_id):
            return "ignored: not the gateway's payment"
        won = type == "charge.dispute.closed"
        if won and found.status != "won":
            return f"dispute closed {found.status}: nothing to give back"
        _, new = await record_dispute(
            self._storage.ledger,
            self._credit,
            payment.org_id,
            dispute_id=found.id,
            payment_id=payment.id,
            micros=found.micros,
            reason=found.reason,
            won=won,
        )
        return "dispute row written" if new else "dispute row there already"

    async def reconcile(self, payment: GatewayPayment) -> bool:
        """The reconciler's: credit a succeeded payment found at Stripe if it is the gateway's;
        True when this call wrote its row."""
        if not await self._owned(payment.customer, payment.org_id):
            return False
        return await self.succeeded(payment) == "credited"

    async def succeeded(self, payment: GatewayPayment) -> str:
        """Credit a succeeded payment once (the webhook and the reconciler)."""
        if payment.status != SUCCEEDED or payment.micros <= 0:
            return f"not credited: {payment.status}"
        _, new = await credit_payment(
            self._storage.ledger,
            self._credit,
            payment.org_id,
            payment.id,
            payment.micros,
            payment.kind,
            payment.card,
        )
        if new:
            log.info("credited %s to %s (%s)", payment.id, payment.org_id, payment.kind)
        return "credited" if new else "credited already"

    async def _failed(self, payment: GatewayPayment, obj: Mapping[str, Any]) -> str:
        if payment.kind != REPLENISH_KIND:
            return "a top-up failed: nothing to credit"
        error = obj.get("last_payment_error") or {}
        code = str(error.get("decline_code") or error.get("code") or "card_declined")
        amount = obj.get("amount")
        done = await replenish_failed(
            self._storage.ledger,
            payment.org_id,
            code=code,
            message=str(error.get("message") or "declined"),
            micros=amount * MICROS_PER_CENT if isinstance(amount, int) else 0,
        )
        if done:
            self._changed(payment.org_id)
        return "auto-replenish turned off" if done else "auto-replenish off already"

    async def _org(self, customer: str) -> str | None:
        return await self._storage.payments.org_of(PROVIDER, customer)

    async def _owned(self, customer: str, org_id: str) -> bool:
        """The payment's customer is that organization's (metadata alone is not trusted)."""
        owner = await self._org(customer)
        if owner != org_id:
            log.warning("a Stripe payment names org %s but its customer is %s's", org_id, owner)
            return False
        return True
