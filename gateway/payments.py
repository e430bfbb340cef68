"""Payment processors behind top-ups. One interface; the built-in `test` processor (CONTRACT):
`pm_card_visa` succeeds, `pm_card_chargeDeclined` is declined, and an org's default payment
method is `pm_card_visa` (card, visa, 4242). A real processor (Stripe) implements the same
interface and keeps its secret encrypted like every other one."""

from __future__ import annotations

from protocol.ids import new_id
from protocol.payments import (
    PaymentDeclined,
    PaymentMethod,
    PaymentProcessor,
    UnknownPaymentMethod,
)

__all__ = [
    "PaymentDeclined",
    "PaymentMethod",
    "PaymentProcessor",
    "TestPaymentProcessor",
    "UnknownPaymentMethod",
    "open_processor",
]


_VISA = PaymentMethod("pm_card_visa", "card", "visa", "4242")
_DECLINED = PaymentMethod("pm_card_chargeDeclined", "card", "visa", "0002")


class TestPaymentProcessor:
    """Deterministic, in-process, no network: for development, tests and the bench."""

    __test__ = False  # not a pytest class
    name = "test"

    def __init__(self) -> None:
        self._charges: dict[str, str] = {}  # reference -> charge id
        self._defaults: dict[str, PaymentMethod] = {}
        self.attempts = 0  # charges tried, declined ones included

    def default_method(self, org_id: str) -> PaymentMethod:
        return self._defaults.get(org_id, _VISA)

    def set_default(self, org_id: str, method_id: str) -> None:
        """Make another known method the org's default (e.g. the declined card, in tests)."""
        self._defaults[org_id] = self.method(org_id, method_id)

    def method(self, org_id: str, method_id: str) -> PaymentMethod:
        for known in (_VISA, _DECLINED):
            if known.id == method_id:
                return known
        raise UnknownPaymentMethod(method_id)

    async def charge(self, org_id: str, method: PaymentMethod, micros: int, reference: str) -> str:
        self.attempts += 1
        if method.id == _DECLINED.id:
            raise PaymentDeclined("Your card was declined.")
        if reference not in self._charges:
            self._charges[reference] = new_id("ch")
        return self._charges[reference]


def open_processor(name: str) -> PaymentProcessor:
    if name == "test":
        return TestPaymentProcessor()
    raise ValueError(f"unknown payment provider {name!r}")
