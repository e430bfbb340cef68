"""The payment reconciler: credits every payment that succeeded at the processor and is missing
from the ledger (docs/billing.md, "Exactly once").

A top-up's request credits its PaymentIntent, and Stripe's `payment_intent.succeeded` webhook
does too; both can miss (the instance died between Stripe's answer and its ledger row, the
webhook endpoint was down or misconfigured). Every `interval_s`, and once at start (an instance
restarted after a crash credits what it left at once), this lists the processor's payments of the
last `window_s` and credits each succeeded one whose row is not there. The row's id comes from
the payment's id, so whichever of the three writes it, it is written once; several instances
may run this at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

import trio

from actors.base import Actor
from protocol.errors import PaymentUnavailable
from protocol.payments import credit_id
from services.stripe.objects import GatewayPayment
from storage.ledger import LedgerRepository

log = logging.getLogger(__name__)


class Source(Protocol):
    def succeeded_since(self, since_unix: int) -> AsyncIterator[GatewayPayment]: ...


class PaymentReconciler(Actor):
    def __init__(
        self,
        source: Source,
        ledger: LedgerRepository,
        settle: Callable[[GatewayPayment], Awaitable[bool]],
        *,
        interval_s: float,
        window_s: float,
        clock: Callable[[], float] = time.time,
        name: str = "payment-reconciler",
    ) -> None:
        self.name = name
        self._source = source
        self._ledger = ledger
        self._settle = settle  # credit it (checking whose it is); True when this call did
        self._interval_s = interval_s
        self._window_s = window_s
        self._clock = clock  # wall seconds: the processor's `created` is Unix time
        self.runs = 0
        self.credited = 0
        self.failures = 0

    def statistics(self) -> dict[str, object]:
        return {"runs": self.runs, "credited": self.credited, "failures": self.failures}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                await self.reconcile_once()
            except PaymentUnavailable as exc:  # the next round tries again
                self.failures += 1
                log.warning("payment reconciliation could not reach the processor: %s", exc)
            await trio.sleep(self._interval_s)

    async def reconcile_once(self) -> int:
        """One round; how many payments it credited."""
        since = int(self._clock() - self._window_s)
        credited = 0
        page: list[GatewayPayment] = []
        async for payment in self._source.succeeded_since(since):
            page.append(payment)
            if len(page) >= 100:
                credited += await self._credit_missing(page)
                page = []
        credited += await self._credit_missing(page)
        self.runs += 1
        self.credited += credited
        return credited

    async def _credit_missing(self, payments: list[GatewayPayment]) -> int:
        if not payments:
            return 0
        stored = await self._ledger.stored_ids([credit_id(p.id) for p in payments])
        credited = 0
        for payment in payments:
            if credit_id(payment.id) in stored:
                continue
            if await self._settle(payment):
                credited += 1
                log.warning(
                    "reconciler credited %s to %s: its request and webhook had not",
                    payment.id,
                    payment.org_id,
                )
        return credited
