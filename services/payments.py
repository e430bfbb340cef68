"""Payment processors behind top-ups. One interface (protocol/payments.py); the built-in `test`
processor: `pm_card_visa` succeeds, `pm_card_chargeDeclined` is declined, and an org's default
payment method is `pm_card_visa` (card, visa, 4242). It takes no money: the gateway warns at
start when billing uses it, and refuses it with GATEWAY_ENV = production. Stripe implements the
same interface (services/stripe/)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import trio
import trio.lowlevel

from protocol.errors import PaymentDeclined, UnknownPaymentMethod
from protocol.ids import new_id
from protocol.payments import (
    TOPUP_KIND,
    Payment,
    PaymentMethod,
    PaymentProcessor,
    Refund,
    SetupIntent,
)

__all__ = [
    "Charge",
    "PaymentDeclined",
    "PaymentMethod",
    "PaymentProcessor",
    "TestPaymentProcessor",
    "UnknownPaymentMethod",
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
    reconciles = False

    def __init__(self) -> None:
        self._live: dict[str, Charge] = {}  # reference -> its charge not refunded
        self._defaults: dict[str, PaymentMethod] = {}
        self._attached: dict[str, list[PaymentMethod]] = {}  # org -> methods beside the default
        self.charges: list[Charge] = []
        self.attempts = 0  # charges tried, declined ones included

    def __repr__(self) -> str:
        refunded = sum(c.refunded for c in self.charges)
        return f"<TestPaymentProcessor charges={len(self.charges)} refunded={refunded}>"

    async def default_method(self, org_id: str) -> PaymentMethod | None:
        return self._defaults.get(org_id, _VISA)

    def set_default_now(self, org_id: str, method_id: str) -> None:
        """Make another known method the org's default (e.g. the declined card, in tests)."""
        self._defaults[org_id] = _known(method_id)

    async def method(self, org_id: str, method_id: str) -> PaymentMethod:
        return _known(method_id)

    async def methods(self, org_id: str) -> list[PaymentMethod]:
        default = self._defaults.get(org_id, _VISA)
        return [default, *(m for m in self._attached.get(org_id, ()) if m != default)]

    async def attach(self, org_id: str, method_id: str) -> PaymentMethod:
        await trio.lowlevel.checkpoint()
        method = _known(method_id)
        attached = self._attached.setdefault(org_id, [])
        if method not in attached:
            attached.append(method)
        return method

    async def set_default(self, org_id: str, method_id: str) -> PaymentMethod:
        method = _known(method_id)
        if method not in await self.methods(org_id):
            raise UnknownPaymentMethod(method_id)
        self._defaults[org_id] = method
        return method

    async def detach(self, org_id: str, method_id: str) -> None:
        method = _known(method_id)
        if method not in await self.methods(org_id):
            raise UnknownPaymentMethod(method_id)
        attached = self._attached.get(org_id, [])
        if method in attached:
            attached.remove(method)
        if self._defaults.get(org_id, _VISA) == method:
            self._defaults[org_id] = _VISA  # the test processor's org always has a card

    async def setup_intent(self, org_id: str) -> SetupIntent:
        id = new_id("seti")
        return SetupIntent(id, f"{id}_secret_{new_id('s')}")

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
        await trio.lowlevel.checkpoint()
        self.attempts += 1
        if method.id == _DECLINED.id:
            raise PaymentDeclined("Your card was declined.")
        live = self._live.get(reference)
        if live is None:
            live = self._live[reference] = Charge(new_id("ch"), org_id, micros, reference)
            self.charges.append(live)
        await trio.lowlevel.checkpoint()  # the answer on its way back: charged, not yet known
        return Payment(live.id, reference, micros)

    async def refund(self, org_id: str, reference: str) -> None:
        await trio.lowlevel.checkpoint()
        live = self._live.pop(reference, None)
        if live is not None:
            live.refunded = True

    async def refund_payment(self, payment_id: str, micros: int | None, key: str) -> Refund:
        """The test processor keeps no record across processes (an operator's refund command
        runs in its own): the refund is taken as asked."""
        await trio.lowlevel.checkpoint()
        for charge in self.charges:
            if charge.id == payment_id:
                charge.refunded = micros is None or micros >= charge.micros
        if micros is None:
            raise PaymentDeclined("The test processor needs the amount to refund.", "amount")
        return Refund("re_" + hashlib.sha256(key.encode()).hexdigest()[:24], payment_id, micros)

    def net_micros(self, org_id: str) -> int:
        """What the org was charged and not refunded."""
        return sum(c.micros for c in self.charges if c.org_id == org_id and not c.refunded)


def _known(method_id: str) -> PaymentMethod:
    for known in (_VISA, _DECLINED):
        if known.id == method_id:
            return known
    raise UnknownPaymentMethod(method_id)
