"""The payment processor interface behind top-ups and auto-replenish (no I/O here; the
built-in `test` processor is services/payments.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class PaymentMethod:
    id: str
    type: str
    brand: str
    last4: str


class PaymentProcessor(Protocol):
    name: str

    def default_method(self, org_id: str) -> PaymentMethod: ...

    def method(self, org_id: str, method_id: str) -> PaymentMethod:
        """Raises UnknownPaymentMethod."""
        ...

    async def charge(self, org_id: str, method: PaymentMethod, micros: int, reference: str) -> str:
        """Take `micros` from the method; returns the processor's charge id. `reference` is
        stable across retries of one top-up (the processor's idempotency key).
        Raises PaymentDeclined."""
        ...

    async def refund(self, org_id: str, reference: str) -> None:
        """Give back the charge made with `reference`, if there is one that was not refunded
        (idempotent: a top-up whose credit could not be written is refunded by reference,
        whether or not its charge happened). A later `charge` with the same reference is a
        new charge."""
        ...
