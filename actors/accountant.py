"""The accountant: holds each organization's spendable balance in memory (actors/accounts.py),
reserves a request's maximum cost before its upstream call, settles the actual charge after,
and writes usage to the ledger in batches through its `BatchWriter` `usage-rows` (on size,
every `flush_interval_s`, and on stop), which runs inside the accountant.

A reservation that needs no I/O is a plain call (`reserve_now`): nothing runs between check
and hold, so concurrent requests of one org cannot both spend the same credit. One that needs
I/O is a message through the inbox, answered by a task of the running accountant, which then
takes the same step (actors/asking.py; the cost of a message: docs/decisions.md). Settle never
waits, and its charge is never refused nor dropped (the writer's `keep_all`): the settings'
`inbox_capacity` bounds the rows queued by holding back new reservations instead (they wait,
or are refused with overflow "reject"). A crash of the accountant keeps the queue (it lives on
the instance) and a stop flushes it, shielded and bounded; a failed write is retried skipping
the ids already stored (never charged twice). A charge settled for a request still
answering (`awaits_event`) waits for its end and is written with its `completion.*` event in
one transaction (actors/awaiting_charges.py).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from functools import partial

import trio

from actors.accounts import KeyView, OrgView, Reservation, Views, labels, reserve_shared
from actors.asking import Asking
from actors.auto_replenish import AutoReplenish
from actors.awaiting_charges import AwaitingCharges, Waiting
from actors.base import Actor
from actors.batch_writer import BatchWriter
from actors.errors import BudgetExceeded, InsufficientCredits, RedisUnavailable
from actors.flushing import flush_shielded
from actors.settings import DEFAULTS, ActorSettings
from actors.shared_holds import HEARTBEAT_S, Settlement, SharedHolds
from actors.throttled_log import ThrottledWarning
from protocol.billing import KeyBudget, day_of, month_of
from protocol.payments import PaymentProcessor
from protocol.timefmt import now_us
from storage.events import NewEvent
from storage.ledger import LedgerRepository, Transaction, UsageCharge
from storage.orgs import OrgRepository

# What callers (gateway/inference, fine-tuning) import from here; defined in actors/accounts.py.
__all__ = ["Accountant", "BudgetExceeded", "InsufficientCredits", "Reservation", "shared_outage"]

log = logging.getLogger("gateway.accountant")

_FLUSH_LIMIT_S = 10.0

shared_outage = ThrottledWarning(
    log, "shared holds unavailable, checking this instance's view only: %s"
)
_Question = tuple[str, int, KeyBudget | None]  # a reservation asked: org, micros, budget


@dataclass
class AccountantStats:
    reserved: int = 0
    refused: int = 0
    settled: int = 0
    flushes: int = 0
    flush_failures: int = 0
    rows_written: int = 0
    shared_unavailable: int = 0  # reservations that fell back to this instance's view


class Accountant(Actor):
    kind = "accountant"

    def __init__(
        self,
        ledger: LedgerRepository,
        orgs: OrgRepository,
        payments: PaymentProcessor | None = None,
        shared: SharedHolds | None = None,
        *,
        flush_interval_s: float = 0.05,
        batch_size: int = 500,
        balance_ttl_s: float = 1.0,
        max_auto_topups_per_day: int = 3,
        replenish_settings: ActorSettings | None = None,
        settings: ActorSettings | None = None,
    ) -> None:
        self.name = "accountant"
        settings = settings or DEFAULTS["accountant"]
        self._asking: Asking[_Question, Reservation] = Asking(
            "accountant", settings, self._answer, lambda held: self.settle(held, None)
        )
        self._serving = False  # started (and not stopped): reservations needing I/O are asked
        self._ledger = ledger
        self._flush_interval_s = flush_interval_s
        self._v = Views(ledger, orgs, balance_ttl_s)  # what this instance knows of balances
        self._exhausted_noted: set[tuple[str, str]] = set()
        # Settled charges (with their Redis settlements) on their way to the ledger; never
        # refused nor dropped: its capacity holds back reservations instead (`keep_all`).
        self._rows: BatchWriter[Waiting] = BatchWriter(
            "usage-rows",
            partial(self._write_usage, retry=False),
            rewrite=partial(self._write_usage, retry=True),
            settings=settings,
            keep_all=True,
            max_batch=batch_size,
            flush_interval_s=flush_interval_s,
            flush_limit_s=_FLUSH_LIMIT_S,
        )
        self._awaiting = AwaitingCharges()  # settled, waiting for their request's end
        self._wake = trio.Event()
        self._shared = shared
        self._shared_queue: list[Settlement] = []  # Redis settlements due (rows stored)
        # Its own actor (started by the runtime next to this one): top-ups found due by a flush.
        self.replenisher = (
            None
            if payments is None
            else AutoReplenish(
                ledger,
                payments,
                self.credit,
                changed=self.refresh,
                settings=replenish_settings,
                max_auto_topups_per_day=max_auto_topups_per_day,
            )
        )
        self.stats = AccountantStats()

    def statistics(self) -> dict[str, object]:
        s = self.stats
        return {
            "orgs": len(self._v.orgs),
            "queued": self._rows.queued(),
            "awaiting_request_end": len(self._awaiting),
            "reserved": s.reserved,
            "refused": s.refused,
            "settled": s.settled,
            "flushes": s.flushes,
            "flush_failures": s.flush_failures,
            "rows_written": s.rows_written,
            "shared_unavailable": s.shared_unavailable,
            "reserving": self._asking.answering,
            "inbox": self._asking.inbox.statistics(),
            "usage_rows": self._rows.statistics(),
        }

    def inbox_depth(self) -> int:
        return self._asking.inbox.depth()

    def inbox_capacity(self) -> int:
        return self._asking.inbox.capacity

    def handling(self) -> tuple[int, float | None]:
        return self._asking.inbox.handling()

    async def plan_of(self, org_id: str) -> str:
        return (await self._v.org(org_id)).plan

    def fresh_plan(self, org_id: str) -> str | None:
        """The org's plan without I/O, when its view is usable (else None: `plan_of`)."""
        view = self._v.usable(org_id)
        return None if view is None else view.plan

    def reserve_now(
        self, org_id: str, micros: int, budget: KeyBudget | None = None
    ) -> Reservation | None:
        """`reserve` without I/O: the usual case, where this instance alone holds (no Redis)
        and the views it needs are fresh. None when it would need I/O: call `reserve`."""
        if self._shared is not None or not self._rows.has_room():
            return None
        view = self._v.usable(org_id)
        if view is None:
            return None
        key_view = None
        if budget is not None and budget.capped:
            key_view = self._v.fresh_key(budget.key_id)
            if key_view is None:
                return None
        return self._hold(view, key_view, org_id, micros, budget)

    async def reserve(
        self, org_id: str, micros: int, budget: KeyBudget | None = None
    ) -> Reservation:
        """Hold `micros` of the org's balance and of the key's budgets. BudgetExceeded when a
        cap of the key cannot hold them, InsufficientCredits when the balance cannot.

        With Redis, the checks are shared by every instance. If Redis cannot answer, this
        instance falls back to its own view (exact for itself, not across instances) rather
        than refusing all traffic; docs/decisions.md, "shared holds".

        Asked of the running accountant through its inbox (and waiting there while it
        restarts); answered here when it is not running (tools, tests, shutdown). While the
        usage rows queued reach the settings' `inbox_capacity`, waits for the writer (or
        `InboxFull`: overflow "reject", or the ledger not writing within 30 s)."""
        if not self._serving:
            return await self._reserve(org_id, micros, budget)
        await self._rows.room()
        return await self._asking.ask((org_id, micros, budget))

    async def _answer(self, question: _Question) -> Reservation:
        return await self._reserve(*question)

    async def _reserve(
        self, org_id: str, micros: int, budget: KeyBudget | None = None
    ) -> Reservation:
        view = await self._v.org(org_id)
        if self._shared is not None:
            try:
                return await self._reserve_shared(self._shared, view, org_id, micros, budget)
            except RedisUnavailable as exc:
                self.stats.shared_unavailable += 1
                shared_outage(exc)
        key_view = None
        if budget is not None and budget.capped:
            key_view = await self._v.key(budget.key_id)
        reservation = self._hold(view, key_view, org_id, micros, budget)
        if self._shared is not None:  # posted to Redis if still held when it is back
            reservation.here = self._shared.hold_here(org_id, reservation.key_id, micros)
        return reservation

    def _hold(
        self,
        view: OrgView,
        key_view: KeyView | None,
        org_id: str,
        micros: int,
        budget: KeyBudget | None,
    ) -> Reservation:
        """The checks and the holds, as one step (no await)."""
        if budget is not None and key_view is not None:
            now = now_us()
            for cap, period in (
                (budget.daily_micros, day_of(now)),
                (budget.monthly_micros, month_of(now)),
            ):
                committed = key_view.committed(period.label)
                if cap is not None and committed + micros > cap:
                    self.stats.refused += 1
                    raise BudgetExceeded(budget, period, cap, committed, key_view.reserved)
        if view.balance - view.pending - view.reserved < micros:
            self.stats.refused += 1
            raise InsufficientCredits(org_id, view.available, micros)
        view.reserved += micros
        self.stats.reserved += 1
        if key_view is None or budget is None:
            return Reservation(org_id, view.plan, micros)
        key_view.reserved += micros
        return Reservation(org_id, view.plan, micros, budget.key_id)

    async def _reserve_shared(
        self,
        shared: SharedHolds,
        view: OrgView,
        org_id: str,
        micros: int,
        budget: KeyBudget | None,
    ) -> Reservation:
        try:
            reservation = await reserve_shared(
                shared, self._ledger, view.plan, org_id, micros, budget
            )
        except (InsufficientCredits, BudgetExceeded):
            self.stats.refused += 1
            raise
        self.stats.reserved += 1
        return reservation

    async def note_exhausted(self, org_id: str, exc: BudgetExceeded) -> None:
        """Write `budget.exhausted` once per key and period (here in memory, and across
        instances through the alerts table)."""
        mark = (exc.budget.key_id, exc.period.label)
        if mark in self._exhausted_noted:
            return
        self._exhausted_noted.add(mark)
        await self._ledger.note_exhausted(org_id, exc.budget, exc.period, exc.cap, exc.committed)

    def settle(
        self, reservation: Reservation, charge: UsageCharge | None, *, awaits_event: bool = False
    ) -> None:
        """Release the reservation and queue the actual charge (None: nothing to bill). With
        `awaits_event`, the charge is written once its request ended (`request_ended`), with
        the request's completion event, or after `AwaitingCharges.LIMIT_S` without it."""
        if not reservation.open:
            return
        reservation.open = False
        if reservation.shared:
            in_redis = self._settle_shared(reservation, charge)
            if charge is not None:
                self._queue_charge(charge, in_redis, awaits_event)
            else:
                self._shared_queue.append(in_redis)
            return
        view = self._v.orgs.get(reservation.org_id)
        if view is not None:
            view.reserved -= reservation.micros
            if charge is not None:
                view.pending += charge.micros
        key_view = self._v.keys.get(reservation.key_id) if reservation.key_id else None
        if key_view is not None:
            key_view.reserved -= reservation.micros
            if charge is not None:
                for label in labels(charge.created_at):
                    key_view.pending[label] = key_view.pending.get(label, 0) + charge.micros
        settlement: Settlement | None = None
        if reservation.here is not None:  # admitted on this view: Redis must count it too
            settlement = Settlement(
                reservation.org_id,
                reservation.key_id,
                reservation.micros,
                0 if charge is None else charge.micros,
                now_us() if charge is None else charge.created_at,
                here=reservation.here,
            )
        if charge is not None:
            self._queue_charge(charge, settlement, awaits_event)
        elif settlement is not None:
            self._shared_queue.append(settlement)

    def _queue_charge(
        self, charge: UsageCharge, settlement: Settlement | None, awaits_event: bool = False
    ) -> None:
        if awaits_event:  # its Redis settlement waits too: never before the row is stored
            self.stats.settled += 1
            self._awaiting.add(charge, settlement, trio.current_time())
            return
        self._enqueue(charge, settlement)
        self.stats.settled += 1

    def _enqueue(self, charge: UsageCharge, settlement: Settlement | None) -> None:
        # A hold in Redis blocks other instances until settled, after its row is stored.
        self._rows.offer((charge, settlement), urgent=settlement is not None)

    def request_ended(self, request_id: str, event: NewEvent | None) -> bool:
        """The request whose charge awaits its end has ended: queue the charge with `event`
        (its completion event, or None) for the next flush. False when no charge of the
        request awaits here (not billed, or written already): the caller writes the event."""
        waiting = self._awaiting.pop(request_id)
        if not waiting:
            return False
        for charge, settlement in waiting:
            charge.event, event = event, None  # the request's one event, with its first charge
            self._enqueue(charge, settlement)
        return True

    def _settle_shared(self, reservation: Reservation, charge: UsageCharge | None) -> Settlement:
        charged = 0 if charge is None else charge.micros
        view = self._v.orgs.get(reservation.org_id)
        if view is not None:
            view.pending += charged  # for this instance's own reads (GET /v1/credits)
        key_view = self._v.keys.get(reservation.key_id) if reservation.key_id else None
        if key_view is not None and charge is not None:  # as `_flushed_keys` takes it off
            for label in labels(charge.created_at):
                key_view.pending[label] = key_view.pending.get(label, 0) + charged
        self._wake.set()  # holds in Redis block other instances until settled: do not wait
        return Settlement(
            org_id=reservation.org_id,
            key_id=reservation.key_id,
            held=reservation.micros,
            charged=charged,
            created_at=now_us() if charge is None else charge.created_at,
        )

    async def credit(
        self,
        org_id: str,
        type: str,
        micros: int,
        description: str,
        *,
        id: str | None = None,
        payment_ref: str | None = None,
    ) -> Transaction:
        """A change outside of usage (top-up, refund, dispute, adjustment; negative takes away),
        written at once and seen by the next reservation; ledger.apply says the rest."""
        async with self._v.lock:
            txn = await self._ledger.apply(
                org_id, type, micros, description, id=id, payment_ref=payment_ref
            )
            if self._shared is not None:
                try:
                    await self._shared.credit(org_id, micros)
                except RedisUnavailable as exc:  # lower until reconciled: only stricter
                    log.warning(
                        "could not add a credit of %s to the shared balance yet: %s", org_id, exc
                    )
            view = self._v.orgs.get(org_id)
            if view is not None:
                view.balance = txn.balance_after_micros
                view.loaded_at = trio.current_time()
            return txn

    def key_spend(self, key_id: str, now: int, stored: tuple[int, int]) -> tuple[int, int]:
        """`stored` (today, this month) plus what this instance settled and not yet wrote."""
        return self._v.key_spend(key_id, now, stored)

    def refresh(self, org_id: str) -> None:
        """Re-read the org's account (settings changed) on its next request."""
        self._v.refresh(org_id)

    def refresh_key(self, key_id: str) -> None:
        """Re-read the key's stored spend on its next request (spend was written outside the
        accountant: a training hold or its refund)."""
        self._v.refresh_key(key_id)

    def pending_micros(self, org_id: str) -> int:
        return self._v.pending_micros(org_id)

    # -- the writer -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as tasks:
                self._v.tasks = tasks
                await tasks.start(self._rows.run)
                tasks.start_soon(self._asking.serve, tasks)
                self._serving = True
                if self._shared is not None:
                    tasks.start_soon(self._heartbeats, self._shared)
                task_status.started()
                while True:  # charges done waiting for their request go to the writer, and
                    with trio.move_on_after(self._flush_interval_s):  # Redis is settled
                        await self._wake.wait()
                    self._wake = trio.Event()
                    self._release_awaiting(trio.current_time())
                    if not await flush_shielded(self._send_shared, _FLUSH_LIMIT_S):
                        log.error("settling in Redis took over %s s; retried", _FLUSH_LIMIT_S)
        finally:
            if trio.current_effective_deadline() == -math.inf:
                self._serving = False  # stopped (not crashed): nobody will read the inbox
                self._asking.refuse_waiting()
            self._v.stopped()
            if not await flush_shielded(self.flush, _FLUSH_LIMIT_S):  # stopping: write it all
                log.error(
                    "the final flush took over %s s: %d usage charges were not written",
                    _FLUSH_LIMIT_S,
                    self._rows.queued() + len(self._awaiting),
                )

    async def _heartbeats(self, shared: SharedHolds) -> None:
        """Keep this instance's holds counting (reservations renew a stale heartbeat too)."""
        while True:
            try:
                await shared.heartbeat()
            except RedisUnavailable as exc:
                log.warning("heartbeat to Redis failed: %s", exc)
            await trio.sleep(HEARTBEAT_S)

    async def flush(self) -> None:
        """Write everything settled so far, charges still awaiting their request's end
        included (their events, if any, then go to the event writer). On failure the batch
        stays queued (in order) and is retried on the next flush. Then, with Redis, count the
        written charges and release their holds there (after the database has them: a value
        read from it meanwhile can only count a charge twice, never miss it)."""
        self._release_awaiting(None)
        await self._rows.flush()
        await self._send_shared()

    async def flush_due(self) -> None:
        """As `flush`, but charges awaiting their request's end wait for it (`LIMIT_S`)."""
        self._release_awaiting(trio.current_time())
        await self._rows.flush()
        await self._send_shared()

    def _release_awaiting(self, now: float | None) -> None:
        for charge, settlement in self._awaiting.take(waited_since=now):
            self._enqueue(charge, settlement)

    async def _write_usage(self, batch: list[Waiting], *, retry: bool) -> None:
        """The usage writer's write (`retry`: a batch whose outcome is unknown, its stored
        rows skipped): one transaction, then this instance's views, then the batch's Redis
        settlements are due. Under the views' lock: a re-read never sees half of it."""
        async with self._v.lock:
            charges = [charge for charge, _ in batch]
            try:
                settled = await self._ledger.settle(charges, skip_stored=retry)
            except BaseException:  # failed, or cut off by _FLUSH_LIMIT_S: retried
                self.stats.flush_failures += 1
                raise
            self.stats.flushes += 1
            self.stats.rows_written += len(batch)
            self._v.written(charges, settled)
            if self.replenisher is not None:
                for org_id in sorted(settled.replenish_due):
                    self.replenisher.due(org_id)
            settlements = [s for _, s in batch if s is not None]
        if settlements:
            self._shared_queue.extend(settlements)
            self._wake.set()

    async def _send_shared(self) -> None:
        """Also how this instance reconciles with Redis after a failure (actors/shared_holds.py);
        `SharedHolds.settle` takes the batch before its first await (cut off, it stays owed)."""
        batch, self._shared_queue = self._shared_queue, []
        if self._shared is None:
            return
        try:
            await self._shared.settle(batch)
        except RedisUnavailable as exc:
            # Kept by SharedHolds and sent again; the holds stay (stricter, never looser).
            self.stats.flush_failures += 1
            shared_outage(exc)
