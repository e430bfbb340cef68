"""What the gateway reads from Stripe's objects (PaymentIntents, charges, disputes), as plain
values: no I/O, no SDK calls. A PaymentIntent is the gateway's when its metadata carries our
`reference` (set when the gateway created it); the org it is for is the one whose Stripe
Customer it was charged to, never a name in the metadata alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol.payments import MICROS_PER_CENT, TOPUP_KIND, description

SUCCEEDED = "succeeded"


class SignatureRejected(Exception):
    """A webhook whose `Stripe-Signature` does not verify (forged, stale, missing)."""


@dataclass(frozen=True, slots=True)
class GatewayPayment:
    """A PaymentIntent the gateway made."""

    id: str  # pi_…
    customer: str
    org_id: str  # as the metadata says: checked against the customer's org before use
    kind: str  # TOPUP_KIND | REPLENISH_KIND
    card: str  # "visa 4242"
    micros: int  # what was received (0 until it succeeded)
    status: str

    @property
    def description(self) -> str:
        return description(self.kind, self.card)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _id(value: Any) -> str | None:
    """A field that is an id, or an expanded object with one."""
    if isinstance(value, Mapping):
        value = value.get("id")
    return _text(value)


def gateway_payment(pi: Mapping[str, Any]) -> GatewayPayment | None:
    """The PaymentIntent as the gateway's payment, or None (not ours, or malformed)."""
    metadata = pi.get("metadata")
    if not isinstance(metadata, Mapping) or _text(metadata.get("reference")) is None:
        return None
    pi_id, customer, org_id = _text(pi.get("id")), _id(pi.get("customer")), metadata.get("org_id")
    received = pi.get("amount_received")
    if pi_id is None or customer is None or _text(org_id) is None:
        return None
    if not isinstance(received, int) or isinstance(received, bool) or received < 0:
        received = 0
    return GatewayPayment(
        id=pi_id,
        customer=customer,
        org_id=str(org_id),
        kind=_text(metadata.get("kind")) or TOPUP_KIND,
        card=_text(metadata.get("card")) or "card",
        micros=received * MICROS_PER_CENT,
        status=_text(pi.get("status")) or "",
    )


@dataclass(frozen=True, slots=True)
class ChargeRef:
    """A charge's payment and customer (charge.refunded, disputes)."""

    charge: str
    payment_intent: str
    customer: str


def charge_ref(charge: Mapping[str, Any]) -> ChargeRef | None:
    ch, pi, customer = (
        _id(charge.get("id")),
        _id(charge.get("payment_intent")),
        _id(charge.get("customer")),
    )
    if ch is None or pi is None or customer is None:
        return None
    return ChargeRef(ch, pi, customer)


@dataclass(frozen=True, slots=True)
class Dispute:
    id: str
    charge: str
    payment_intent: str | None
    micros: int
    reason: str
    status: str


def dispute(obj: Mapping[str, Any]) -> Dispute | None:
    dp, charge, amount = _id(obj.get("id")), _id(obj.get("charge")), obj.get("amount")
    if dp is None or charge is None or not isinstance(amount, int) or amount < 0:
        return None
    return Dispute(
        id=dp,
        charge=charge,
        payment_intent=_id(obj.get("payment_intent")),
        micros=amount * MICROS_PER_CENT,
        reason=_text(obj.get("reason")) or "unspecified",
        status=_text(obj.get("status")) or "",
    )
