"""Payment processors behind top-ups. One interface; the built-in `test` processor:
`pm_card_visa` succeeds, `pm_card_chargeDeclined` is declined, and an org's default payment
method is `pm_card_visa` (card, visa, 4242). A real processor (Stripe) implements the same
interface and keeps its secret encrypted like every other one."""

from __future__ import annotations

from dataclasses import dataclass

import trio
import trio.lowlevel

from protocol.errors import PaymentDeclined, UnknownPaymentMethod
from protocol.ids import new_id
from protocol.payments import PaymentMethod, PaymentProcessor

__all__ = [
    "Charge",
    "PaymentDeclined",
    "PaymentMethod",
    "PaymentProcessor",
    "TestPaymentProcessor",
    "UnknownPaymentMethod",
    "open_processor",
]


_VISA = PaymentMethod("pm_card_visa", "card", "visa", "4242")
_DECLINED = PaymentMethod("pm_card_chargeDeclined", "card", "visa", "0002")


@dataclass(slots=True)
class Charge:
    """One charge the test processor took: live until refunded."""

    id: str
    org_id: str
    micros: int
    reference: str
    refunded: bool = False


class TestPaymentProcessor:
    """Deterministic, in-process, no network: for development, tests and the bench. Charge
    and refund each pass one checkpoint, as a network call would (so tests can cancel there).
    `charges` keeps every charge taken, refunded ones included."""

    __test__ = False  # not a pytest class
    name = "test"

    def __init__(self) -> None:
        self._live: dict[str, Charge] = {}  # reference -> its charge not refunded
        self._defaults: dict[str, PaymentMethod] = {}
        self.charges: list[Charge] = []
        self.attempts = 0  # charges tried, declined ones included

    def __repr__(self) -> str:
        refunded = sum(c.refunded for c in self.charges)
        return f"<TestPaymentProcessor charges={len(self.charges)} refunded={refunded}>"

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
        await trio.lowlevel.checkpoint()
        self.attempts += 1
        if method.id == _DECLINED.id:
            raise PaymentDeclined("Your card was declined.")
        live = self._live.get(reference)
        if live is None:
            live = self._live[reference] = Charge(new_id("ch"), org_id, micros, reference)
            self.charges.append(live)
        await trio.lowlevel.checkpoint()  # the answer on its way back: charged, not yet known
        return live.id

    async def refund(self, org_id: str, reference: str) -> None:
        await trio.lowlevel.checkpoint()
        live = self._live.pop(reference, None)
        if live is not None:
            live.refunded = True

    def net_micros(self, org_id: str) -> int:
        """What the org was charged and not refunded."""
        return sum(c.micros for c in self.charges if c.org_id == org_id and not c.refunded)


def open_processor(name: str) -> PaymentProcessor:
    if name == "test":
        return TestPaymentProcessor()
    raise ValueError(f"unknown payment provider {name!r}")
