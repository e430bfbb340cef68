"""The auto-replenish actor: tops up an organization whose usage flush found a top-up due
(docs/billing.md, "Auto-replenish"), apart from the accountant, so a slow or failing payment
processor never holds up reservations or usage writes, and a crash of one does not stop the
other.

Its messages are fire-and-forget "org X is due" notes (`due`, never waits). They are deduped
per org: a note for an org already waiting in the inbox or being topped up here is dropped, and
the inbox (settings kind "auto_replenish", "drop_oldest" by default) drops its oldest note when
full — harmless, because a top-up left due is found again at the org's next usage flush. One
attempt at a time per org on this instance; across instances the ledger's claim keeps others
out and counts the day's cap (storage/replenish.py). Attempts for different orgs run
concurrently, each charging first and crediting after, never one without the other
(actors/charge_credit.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from actors.base import Actor
from actors.charge_credit import refund_unless_credited
from actors.inbox import Inbox
from actors.settings import DEFAULTS, ActorSettings
from protocol.billing import day_of
from protocol.errors import PaymentDeclined, PaymentRequiresAction, PaymentUnavailable
from protocol.payments import REPLENISH_KIND, PaymentProcessor
from protocol.timefmt import now_us
from services.payment_ledger import Credit, credit_payment, replenish_failed
from storage.ledger import LedgerRepository

log = logging.getLogger("gateway.accountant")

# An attempt's claim counts as abandoned after this (a crashed instance); a processor that could
# not be reached is tried again after this long, not in a loop. A declined payment turns
# auto-replenish off (with the reason on the account and `billing.auto_replenish_failed`) until
# the org switches it on again (docs/billing.md).
REPLENISH_CLAIM_US = 5 * 60 * 1_000_000
REPLENISH_RETRY_US = 60 * 60 * 1_000_000


@dataclass
class ReplenishStats:
    due: int = 0  # notes received (before dedupe)
    deduped: int = 0  # notes for an org already waiting or being topped up
    replenished: int = 0
    replenish_failures: int = 0
    replenish_limited: int = 0  # due top-ups refused by the daily cap (logged, with an event)


class AutoReplenish(Actor):
    kind = "auto_replenish"

    def __init__(
        self,
        ledger: LedgerRepository,
        payments: PaymentProcessor,
        credit: Credit,
        *,
        changed: Callable[[str], None] = lambda org_id: None,
        settings: ActorSettings | None = None,
        max_auto_topups_per_day: int = 3,
    ) -> None:
        settings = settings or DEFAULTS["auto_replenish"]
        self.name = "auto-replenish"
        self._ledger = ledger
        self._payments = payments
        self._credit = credit  # the accountant's: its view of the org sees the top-up at once
        self._changed = changed  # the accountant's `refresh`: auto-replenish was turned off
        self._max_per_day = max_auto_topups_per_day
        self._inbox: Inbox[str] = Inbox(
            settings.inbox_capacity, overflow=settings.overflow, name=self.name
        )
        self._waiting: set[str] = set()  # orgs with a note in the inbox
        self._running: set[str] = set()  # orgs with an attempt in progress
        self._capped: dict[str, str] = {}  # org: the UTC day its cap was found used up
        self.stats = ReplenishStats()

    def due(self, org_id: str) -> None:
        """A usage flush found a top-up due for `org_id`. Never waits."""
        self.stats.due += 1
        if org_id in self._waiting or org_id in self._running:
            self.stats.deduped += 1
            return
        if self._capped.get(org_id) == day_of(now_us()).label:
            return  # the day's cap is used up: no claim per flush until the next UTC day
        try:
            self._inbox.send_nowait(org_id)
        except trio.WouldBlock:
            if self._inbox.overflow != "drop_oldest":
                self._inbox.rejected += 1
                return  # still due: found again at the org's next usage flush
            self._waiting.discard(self._inbox.drop_oldest())
            self._inbox.send_nowait(org_id)
        self._waiting.add(org_id)

    def busy(self, org_id: str) -> bool:
        """A note for the org waits, or an attempt for it runs."""
        return org_id in self._waiting or org_id in self._running

    def idle(self) -> bool:
        return not self._waiting and not self._running

    def inbox_depth(self) -> int:
        return self._inbox.depth()

    def inbox_capacity(self) -> int:
        return self._inbox.capacity

    def statistics(self) -> dict[str, object]:
        s = self.stats
        return {
            "running": len(self._running),
            "due": s.due,
            "deduped": s.deduped,
            "replenished": s.replenished,
            "replenish_failures": s.replenish_failures,
            "replenish_limited": s.replenish_limited,
            "inbox": self._inbox.statistics(),
        }

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as attempts:
                task_status.started()
                async for org_id in self._inbox:
                    self._waiting.discard(org_id)
                    if org_id in self._running:
                        continue
                    self._running.add(org_id)
                    attempts.start_soon(self._replenish, org_id)
        finally:
            self._running.clear()

    async def _replenish(self, org_id: str) -> None:
        try:
            await self._attempt(org_id)
        except Exception:
            log.exception("auto-replenish of %s failed", org_id)
        finally:
            self._running.discard(org_id)

    async def _attempt(self, org_id: str) -> None:
        now = now_us()
        claim = await self._ledger.claim_replenish(
            org_id,
            now,
            stale_after_us=REPLENISH_CLAIM_US,
            retry_after_us=REPLENISH_RETRY_US,
            max_per_day=self._max_per_day,
        )
        if claim.capped:
            self._capped[org_id] = day_of(now).label
        if claim.limited is not None:  # once per org and UTC day, with the event
            self.stats.replenish_limited += 1
            log.warning(
                "auto-replenish of %s is due but its %d automatic top-ups of %s are used"
                " up ([billing] max_auto_topups_per_day); wrote billing.auto_topup_limited",
                org_id,
                self._max_per_day,
                claim.limited["day"],
            )
        amount = claim.amount
        if amount is None:
            return  # not due, another instance has it, a failure waits, or the day's cap
        reference = f"replenish:{org_id}:{now}"
        try:
            method = await self._payments.default_method(org_id)
            if method is None:
                raise PaymentDeclined("The org has no default payment method.", "no_payment_method")
            payment = await self._payments.charge(
                org_id, method, amount, reference, kind=REPLENISH_KIND, off_session=True
            )
        except (PaymentDeclined, PaymentRequiresAction) as exc:  # off session: no one to ask
            self.stats.replenish_failures += 1
            code = exc.reason if isinstance(exc, PaymentDeclined) else "authentication_required"
            if await replenish_failed(
                self._ledger, org_id, code=code, message=str(exc), micros=amount
            ):
                self._changed(org_id)
            return
        except PaymentUnavailable as exc:  # retried after REPLENISH_RETRY_US
            self.stats.replenish_failures += 1
            log.warning("auto-replenish of %s failed: %s; retrying later", org_id, exc)
            await refund_unless_credited(self._ledger, self._payments, org_id, reference)
            await self._ledger.end_replenish(org_id, failure=str(exc), now=now_us())
            return
        except BaseException:  # the charge may have happened
            await refund_unless_credited(self._ledger, self._payments, org_id, reference)
            raise
        try:
            await credit_payment(
                self._ledger,
                self._credit,
                org_id,
                payment.id,
                amount,
                REPLENISH_KIND,
                method.label,
                credit_ref=payment.credit_ref,
            )
        except BaseException:  # failed or stopped: never charged without the credit
            await refund_unless_credited(self._ledger, self._payments, org_id, reference)
            raise
        await self._ledger.end_replenish(org_id, failure=None, now=now_us())
        self.stats.replenished += 1
