"""Payment processors behind top-ups. One interface; the built-in `test` processor (CONTRACT):
`pm_card_visa` succeeds, `pm_card_chargeDeclined` is declined, and an org's default payment
method is `pm_card_visa` (card, visa, 4242). A real processor (Stripe) implements the same
interface and keeps its secret encrypted like every other one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from protocol.ids import new_id


@dataclass(frozen=True, slots=True)
class PaymentMethod:
    id: str
    type: str
    brand: str
    last4: str


class PaymentDeclined(Exception):
    """The processor refused the charge (402); nothing was taken."""


class UnknownPaymentMethod(Exception):
    """No such payment method for this organization (400)."""


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


_VISA = PaymentMethod("pm_card_visa", "card", "visa", "4242")
_DECLINED = PaymentMethod("pm_card_chargeDeclined", "card", "visa", "0002")


class TestPaymentProcessor:
    """Deterministic, in-process, no network: for development, tests and the bench."""

    __test__ = False  # not a pytest class
    name = "test"

    def __init__(self) -> None:
        self._charges: dict[str, str] = {}  # reference -> charge id

    def default_method(self, org_id: str) -> PaymentMethod:
        return _VISA

    def method(self, org_id: str, method_id: str) -> PaymentMethod:
        for known in (_VISA, _DECLINED):
            if known.id == method_id:
                return known
        raise UnknownPaymentMethod(method_id)

    async def charge(self, org_id: str, method: PaymentMethod, micros: int, reference: str) -> str:
        if method.id == _DECLINED.id:
            raise PaymentDeclined("Your card was declined.")
        if reference not in self._charges:
            self._charges[reference] = new_id("ch")
        return self._charges[reference]


def open_processor(name: str) -> PaymentProcessor:
    if name == "test":
        return TestPaymentProcessor()
    raise ValueError(f"unknown payment provider {name!r}")
