"""The accountant: holds each organization's spendable balance in memory, reserves a request's
maximum cost before its upstream call, settles the actual charge after, and writes usage to the
ledger in batches (one transaction per flush: on size, every `flush_interval_s`, and on stop).

Reserve and settle are plain method calls (no inbox): under Trio nothing runs between the check
and the reservation, so concurrent requests of one org cannot both spend the same credit. The
view of an org is `balance (as stored) - pending (settled, not flushed) - reserved`; the stored
balance is re-read at most every `balance_ttl_s` and after every flush, always under the same
lock as the flushes, so a re-read never misses or double-counts a batch.

A crash between settle and flush loses at most the unflushed batch (those requests go unbilled);
a flush that fails is retried with the same transaction ids, skipping the ones already stored,
so a batch is never charged twice (docs/billing.md).

A charge settled for a request still answering (`awaits_event`) waits for the request's end
(`request_ended`), where its `completion.*` event, if one is made, joins it: the flush writes
both in one transaction, so a billed request's event is never lost without its charge
(actors/awaiting_charges.py).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import trio

from actors.auto_replenish import AutoReplenish
from actors.awaiting_charges import AwaitingCharges
from actors.base import Actor
from actors.errors import RedisUnavailable
from actors.flushing import flush_shielded
from actors.settings import ActorSettings
from actors.shared_holds import (
    HEARTBEAT_S,
    Settlement,
    SharedHolds,
)
from actors.throttled_log import ThrottledWarning
from protocol.billing import KeyBudget, Period, day_of, month_of
from protocol.payments import PaymentProcessor
from protocol.timefmt import now_us
from storage.events import NewEvent
from storage.ledger import LedgerRepository, Transaction, UsageCharge
from storage.orgs import OrgRepository

log = logging.getLogger("gateway.accountant")

_FLUSH_LIMIT_S = 10.0


shared_outage = ThrottledWarning(
    log, "shared holds unavailable, checking this instance's view only: %s"
)


class BudgetExceeded(Exception):
    """The key's daily or monthly cap cannot hold the reservation."""

    def __init__(
        self,
        budget: KeyBudget,
        period: Period,
        cap: int,
        committed: int,
        held: int | None = None,
    ) -> None:
        super().__init__(f"{budget.key_id}: {period.label} cap {cap}, committed {committed}")
        self.budget = budget
        self.period = period
        self.cap = cap
        self.committed = committed  # spent + settled-unwritten + reserved, before this request
        self.held = held  # the reserved part of it (None: not known apart)


class InsufficientCredits(Exception):
    def __init__(self, org_id: str, available_micros: int, needed_micros: int) -> None:
        super().__init__(f"{org_id}: {available_micros} available, {needed_micros} needed")
        self.available_micros = available_micros
        self.needed_micros = needed_micros


@dataclass
class OrgView:
    plan: str
    balance: int  # as stored, at `loaded_at` or the last flush
    loaded_at: float
    pending: int = 0  # settled here, not yet flushed
    reserved: int = 0  # held for requests in flight

    @property
    def available(self) -> int:
        return self.balance - self.pending - self.reserved


@dataclass
class KeyView:
    """A capped key's spend per period label (`d:…`, `m:…`): as stored, settled but not yet
    written, and reserved by requests in flight."""

    loaded_at: float
    spent: dict[str, int] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    reserved: int = 0

    def committed(self, label: str) -> int:
        return self.spent.get(label, 0) + self.pending.get(label, 0) + self.reserved


@dataclass
class Reservation:
    org_id: str
    plan: str
    micros: int
    key_id: str | None = None  # set when a capped key's view holds part of it
    shared: bool = False  # held in Redis (SharedHolds), settled there at the next flush
    here: int | None = None  # with Redis, held on this view meanwhile (SharedHolds.hold_here)
    open: bool = True


@dataclass
class AccountantStats:
    reserved: int = 0
    refused: int = 0
    settled: int = 0
    flushes: int = 0
    flush_failures: int = 0
    rows_written: int = 0
    shared_unavailable: int = 0  # reservations that fell back to this instance's view


@dataclass
class _Queue:
    charges: list[UsageCharge] = field(default_factory=list)
    retry: bool = False  # the head of the queue failed once: skip ids already stored


class Accountant(Actor):
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
    ) -> None:
        self.name = "accountant"
        self._ledger = ledger
        self._orgs = orgs
        self._flush_interval_s = flush_interval_s
        self._batch_size = batch_size
        self._balance_ttl_s = balance_ttl_s
        self._views: dict[str, OrgView] = {}
        self._keys: dict[str, KeyView] = {}
        self._exhausted_noted: set[tuple[str, str]] = set()
        self._queue = _Queue()
        self._awaiting = AwaitingCharges()  # settled, waiting for their request's end
        self._lock = trio.Lock()  # flushes, balance reads and credits: one at a time
        self._wake = trio.Event()
        self._shared = shared
        self._shared_queue: list[Settlement] = []  # Redis settlements for the next flush
        # Its own actor (started by the runtime next to this one): top-ups found due by a flush.
        self.replenisher = (
            None
            if payments is None
            else AutoReplenish(
                ledger,
                payments,
                self.credit,
                settings=replenish_settings,
                max_auto_topups_per_day=max_auto_topups_per_day,
            )
        )
        self._rereading: set[str] = set()  # orgs whose stale view is being re-read
        self._tasks: trio.Nursery | None = None  # while running: auto-replenish attempts
        self.stats = AccountantStats()

    def statistics(self) -> dict[str, object]:
        s = self.stats
        return {
            "orgs": len(self._views),
            "queued": len(self._queue.charges),
            "awaiting_request_end": len(self._awaiting),
            "reserved": s.reserved,
            "refused": s.refused,
            "settled": s.settled,
            "flushes": s.flushes,
            "flush_failures": s.flush_failures,
            "rows_written": s.rows_written,
            "shared_unavailable": s.shared_unavailable,
        }

    def inbox_depth(self) -> int:
        return len(self._queue.charges)

    # -- the hot path ------------------------------------------------------------------

    async def plan_of(self, org_id: str) -> str:
        return (await self._view(org_id)).plan

    def fresh_plan(self, org_id: str) -> str | None:
        """The org's plan without I/O, when its view is usable (else None: `plan_of`)."""
        view = self._usable_view(org_id)
        return None if view is None else view.plan

    def reserve_now(
        self, org_id: str, micros: int, budget: KeyBudget | None = None
    ) -> Reservation | None:
        """`reserve` without I/O: the usual case, where this instance alone holds (no Redis)
        and the views it needs are fresh. None when it would need I/O: call `reserve`."""
        if self._shared is not None:
            return None
        view = self._usable_view(org_id)
        if view is None:
            return None
        key_view = None
        if budget is not None and budget.capped:
            key_view = self._keys.get(budget.key_id)
            if key_view is None or trio.current_time() - key_view.loaded_at >= self._balance_ttl_s:
                return None
        return self._hold(view, key_view, org_id, micros, budget)

    async def reserve(
        self, org_id: str, micros: int, budget: KeyBudget | None = None
    ) -> Reservation:
        """Hold `micros` of the org's balance and of the key's budgets. BudgetExceeded when a
        cap of the key cannot hold them, InsufficientCredits when the balance cannot.

        With Redis, the checks are shared by every instance. If Redis cannot answer, this
        instance falls back to its own view (exact for itself, not across instances) rather
        than refusing all traffic; docs/decisions.md, "shared holds"."""
        view = await self._view(org_id)
        if self._shared is not None:
            try:
                return await self._reserve_shared(self._shared, view, org_id, micros, budget)
            except RedisUnavailable as exc:
                self.stats.shared_unavailable += 1
                shared_outage(exc)
        key_view = None
        if budget is not None and budget.capped:
            key_view = await self._key_view(budget.key_id)
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
        async def stored_balance() -> int:
            return (await self._ledger.account(org_id)).balance_micros

        async def stored_spend() -> tuple[int, int]:
            assert budget is not None
            return (await self._ledger.key_spend([budget.key_id], now_us()))[budget.key_id]

        refusal = await shared.reserve(
            org_id, micros, budget, stored_balance=stored_balance, stored_spend=stored_spend
        )
        if refusal is not None:
            self.stats.refused += 1
            if refusal.kind == "balance":
                raise InsufficientCredits(org_id, refusal.amount, micros)
            assert budget is not None
            now = now_us()
            period = day_of(now) if refusal.kind == "day" else month_of(now)
            cap = budget.daily_micros if refusal.kind == "day" else budget.monthly_micros
            assert cap is not None
            raise BudgetExceeded(budget, period, cap, refusal.amount, refusal.held)
        self.stats.reserved += 1
        key_id = budget.key_id if budget is not None and budget.capped else None
        return Reservation(org_id, view.plan, micros, key_id=key_id, shared=True)

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
        view = self._views.get(reservation.org_id)
        if view is not None:
            view.reserved -= reservation.micros
            if charge is not None:
                view.pending += charge.micros
        key_view = self._keys.get(reservation.key_id) if reservation.key_id else None
        if key_view is not None:
            key_view.reserved -= reservation.micros
            if charge is not None:
                for label in _labels(charge.created_at):
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
        if settlement is not None:
            self._shared_queue.append(settlement)
        self._queue.charges.append(charge)
        if len(self._queue.charges) >= self._batch_size:
            self._wake.set()

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
        view = self._views.get(reservation.org_id)
        if view is not None:
            view.pending += charged  # for this instance's own reads (GET /v1/credits)
        key_view = self._keys.get(reservation.key_id) if reservation.key_id else None
        if key_view is not None and charge is not None:  # as `_flushed_keys` takes it off
            for label in _labels(charge.created_at):
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
        self, org_id: str, type: str, micros: int, description: str, *, id: str | None = None
    ) -> Transaction:
        """A balance change made on this instance outside of usage (top-up, adjustment): written
        at once, and seen by the next reservation. With `id`, written once: a second credit
        with it raises UniqueViolation and changes nothing."""
        async with self._lock:
            txn = await self._ledger.apply(org_id, type, micros, description, id=id)
            if self._shared is not None:
                try:
                    await self._shared.credit(org_id, micros)
                except RedisUnavailable as exc:  # lower until reconciled: only stricter
                    log.warning(
                        "could not add a credit of %s to the shared balance yet: %s", org_id, exc
                    )
            view = self._views.get(org_id)
            if view is not None:
                view.balance = txn.balance_after_micros
                view.loaded_at = trio.current_time()
            return txn

    def key_spend(self, key_id: str, now: int, stored: tuple[int, int]) -> tuple[int, int]:
        """`stored` (today, this month) plus what this instance settled and not yet wrote."""
        view = self._keys.get(key_id)
        if view is None:
            return stored
        day, month = _labels(now)
        return stored[0] + view.pending.get(day, 0), stored[1] + view.pending.get(month, 0)

    def refresh(self, org_id: str) -> None:
        """Re-read the org's account (settings changed) on its next request."""
        view = self._views.get(org_id)
        if view is not None:
            view.loaded_at = -math.inf

    def refresh_key(self, key_id: str) -> None:
        """Re-read the key's stored spend on its next request (spend was written outside the
        accountant: a training hold or its refund)."""
        view = self._keys.get(key_id)
        if view is not None:
            view.loaded_at = -math.inf

    def pending_micros(self, org_id: str) -> int:
        view = self._views.get(org_id)
        return 0 if view is None else view.pending

    def _usable_view(self, org_id: str) -> OrgView | None:
        """The org's view when it can be used without I/O: fresh, or stale by age only (not
        invalidated by `refresh`) while the accountant runs, in which case it is re-read in
        the background. Requests never wait for that re-read (they waited behind the flush
        holding the lock: a stall of every request of the org once a second). A stale view
        is still exact for this instance's own spending; what it misses is a change made
        elsewhere (another instance's top-up, a plan change) for one re-read longer."""
        view = self._views.get(org_id)
        if view is None:
            return None
        age = trio.current_time() - view.loaded_at
        if age < self._balance_ttl_s:
            return view
        if age == math.inf or self._tasks is None:
            return None
        if org_id not in self._rereading:
            self._rereading.add(org_id)
            self._tasks.start_soon(self._reread, org_id)
        return view

    async def _reread(self, org_id: str) -> None:
        try:
            await self._view(org_id, reread=True)
        except Exception as exc:  # the stale view stays in use; the next request tries again
            log.warning("re-reading the account of %s failed: %s", org_id, exc)
        finally:
            self._rereading.discard(org_id)

    async def _view(self, org_id: str, *, reread: bool = False) -> OrgView:
        view = None if reread else self._usable_view(org_id)
        if view is not None:
            return view
        async with self._lock:  # no flush in between: `pending` matches what is stored
            view = self._views.get(org_id)
            now = trio.current_time()
            if view is not None and now - view.loaded_at < self._balance_ttl_s:
                return view  # another request re-read it while this one waited
            account = await self._ledger.account(org_id)
            org = await self._orgs.get(org_id)  # re-read too: the plan (and fee) may change
            plan = org.plan if org else "free"
            if view is None:
                view = self._views[org_id] = OrgView(plan=plan, balance=0, loaded_at=now)
            view.plan = plan
            view.balance = account.balance_micros
            view.loaded_at = now
            return view

    async def _key_view(self, key_id: str) -> KeyView:
        view = self._keys.get(key_id)
        if view is not None and trio.current_time() - view.loaded_at < self._balance_ttl_s:
            return view
        async with self._lock:  # as for balances: never between a flush and its bookkeeping
            view = self._keys.get(key_id)
            now = trio.current_time()
            if view is not None and now - view.loaded_at < self._balance_ttl_s:
                return view
            wall = now_us()
            day, month = (await self._ledger.key_spend([key_id], wall))[key_id]
            if view is None:
                view = self._keys[key_id] = KeyView(loaded_at=now)
            view.spent = {day_of(wall).label: day, month_of(wall).label: month}
            view.loaded_at = now
            return view

    # -- the flusher -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as tasks:
                self._tasks = tasks
                if self._shared is not None:
                    tasks.start_soon(self._heartbeats, self._shared)
                task_status.started()
                while True:
                    with trio.move_on_after(self._flush_interval_s):
                        await self._wake.wait()
                    self._wake = trio.Event()
                    if not await flush_shielded(self.flush_due, _FLUSH_LIMIT_S):
                        log.error("a flush took over %s s; its batch is retried", _FLUSH_LIMIT_S)
        finally:
            self._tasks = None
            self._rereading.clear()
            if not await flush_shielded(self.flush, _FLUSH_LIMIT_S):  # stopping: write it all
                log.error(
                    "the final flush took over %s s: %d usage charges were not written",
                    _FLUSH_LIMIT_S,
                    len(self._queue.charges) + len(self._awaiting),
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
        """Write everything settled so far in one transaction, charges still awaiting their
        request's end included (their events, if any, then go to the event writer). On
        failure the batch stays queued (in order) and is retried on the next flush. Then,
        with Redis, count the written charges and release their holds there (after the
        database has them: a value read from it meanwhile can only count a charge twice,
        never miss it)."""
        await self._flush_shared(await self._flush_usage(everything=True))

    async def flush_due(self) -> None:
        """The loop's flush: as `flush`, but charges awaiting their request's end wait for it
        (up to `awaiting_charges.LIMIT_S`)."""
        await self._flush_shared(await self._flush_usage(everything=False))

    async def _flush_usage(self, *, everything: bool) -> list[Settlement]:
        """The usage write; returns the Redis settlements whose charges are now stored."""
        async with self._lock:
            now = None if everything else trio.current_time()
            for charge, settlement in self._awaiting.take(waited_since=now):
                self._enqueue(charge, settlement)
            shared, self._shared_queue = self._shared_queue, []
            queue = self._queue
            if not queue.charges:
                return shared
            batch, retry = queue.charges, queue.retry
            self._queue = _Queue()
            written = False
            try:
                settled = await self._ledger.settle(batch, skip_stored=retry)
                written = True
            except Exception:
                log.exception("writing %d usage rows failed; retrying", len(batch))
                return []
            finally:
                if not written:  # failed, or cut off by _FLUSH_LIMIT_S: outcome unknown
                    self.stats.flush_failures += 1
                    self._queue = _Queue(batch + self._queue.charges, retry=True)
                    self._shared_queue = shared + self._shared_queue
            self.stats.flushes += 1
            self.stats.rows_written += len(batch)
            flushed: dict[str, int] = {}
            for charge in batch:
                flushed[charge.org_id] = flushed.get(charge.org_id, 0) + charge.micros
            for org_id, micros in flushed.items():
                view = self._views.get(org_id)
                if view is not None:
                    view.pending -= micros
                    if org_id not in settled.balances:  # a retry found all its rows stored
                        view.loaded_at = -math.inf  # balance not read back: re-read it
                        continue
                    view.balance = settled.balances[org_id]
                    if org_id in settled.replenish_due and self.replenisher is not None:
                        self.replenisher.due(org_id)
            self._flushed_keys(batch, settled.key_spend)
            return shared

    async def _flush_shared(self, batch: list[Settlement]) -> None:
        """Also how this instance reconciles with Redis after a failure (actors/shared_holds.py)."""
        if self._shared is None:
            return
        try:
            await self._shared.settle(batch)
        except RedisUnavailable as exc:
            # Kept by SharedHolds and sent again; the holds stay (stricter, never looser).
            self.stats.flush_failures += 1
            shared_outage(exc)

    def _flushed_keys(self, batch: list[UsageCharge], totals: dict[tuple[str, str], int]) -> None:
        """Move the batch's key spend from pending to stored (capped keys only have views)."""
        if not self._keys:
            return
        for charge in batch:
            key_view = self._keys.get(charge.key_id) if charge.key_id else None
            if key_view is None:
                continue
            for label in _labels(charge.created_at):
                left = key_view.pending.get(label, 0) - charge.micros
                if left:
                    key_view.pending[label] = left
                else:
                    key_view.pending.pop(label, None)
        for (key_id, label), total in totals.items():
            key_view = self._keys.get(key_id)
            if key_view is not None:
                key_view.spent[label] = total


def _labels(created_at: int) -> tuple[str, str]:
    return day_of(created_at).label, month_of(created_at).label
