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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from actors.base import Actor
from protocol.ids import new_id
from storage.ledger import LedgerRepository, Transaction, UsageCharge
from storage.orgs import OrgRepository

log = logging.getLogger("gateway.accountant")


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
class Reservation:
    org_id: str
    plan: str
    micros: int
    open: bool = True


@dataclass
class AccountantStats:
    reserved: int = 0
    refused: int = 0
    settled: int = 0
    flushes: int = 0
    flush_failures: int = 0
    rows_written: int = 0


@dataclass
class _Queue:
    charges: list[UsageCharge] = field(default_factory=list)
    retry: bool = False  # the head of the queue failed once: skip ids already stored


class Accountant(Actor):
    def __init__(
        self,
        ledger: LedgerRepository,
        orgs: OrgRepository,
        *,
        flush_interval_s: float = 0.05,
        batch_size: int = 500,
        balance_ttl_s: float = 1.0,
    ) -> None:
        self.name = "accountant"
        self._ledger = ledger
        self._orgs = orgs
        self._flush_interval_s = flush_interval_s
        self._batch_size = batch_size
        self._balance_ttl_s = balance_ttl_s
        self._views: dict[str, OrgView] = {}
        self._queue = _Queue()
        self._lock = trio.Lock()  # flushes, balance reads and credits: one at a time
        self._wake = trio.Event()
        self.stats = AccountantStats()

    def statistics(self) -> dict[str, object]:
        s = self.stats
        return {
            "orgs": len(self._views),
            "queued": len(self._queue.charges),
            "reserved": s.reserved,
            "refused": s.refused,
            "settled": s.settled,
            "flushes": s.flushes,
            "flush_failures": s.flush_failures,
            "rows_written": s.rows_written,
        }

    def inbox_depth(self) -> int:
        return len(self._queue.charges)

    # -- the hot path ------------------------------------------------------------------

    async def plan_of(self, org_id: str) -> str:
        return (await self._view(org_id)).plan

    async def reserve(self, org_id: str, micros: int) -> Reservation:
        """Hold `micros` of the org's balance; InsufficientCredits when it cannot cover them."""
        view = await self._view(org_id)
        if view.available < micros:
            self.stats.refused += 1
            raise InsufficientCredits(org_id, view.available, micros)
        view.reserved += micros
        self.stats.reserved += 1
        return Reservation(org_id, view.plan, micros)

    def settle(self, reservation: Reservation, charge: UsageCharge | None) -> None:
        """Release the reservation and queue the actual charge (None: nothing to bill)."""
        if not reservation.open:
            return
        reservation.open = False
        view = self._views.get(reservation.org_id)
        if view is not None:
            view.reserved -= reservation.micros
            if charge is not None:
                view.pending += charge.micros
        if charge is None:
            return
        self.stats.settled += 1
        self._queue.charges.append(charge)
        if len(self._queue.charges) >= self._batch_size:
            self._wake.set()

    async def credit(self, org_id: str, type: str, micros: int, description: str) -> Transaction:
        """A balance change made on this instance outside of usage (top-up, adjustment): written
        at once, and seen by the next reservation."""
        async with self._lock:
            txn = await self._ledger.apply(org_id, type, micros, description)
            view = self._views.get(org_id)
            if view is not None:
                view.balance = txn.balance_after_micros
                view.loaded_at = trio.current_time()
            return txn

    def pending_micros(self, org_id: str) -> int:
        view = self._views.get(org_id)
        return 0 if view is None else view.pending

    async def _view(self, org_id: str) -> OrgView:
        view = self._views.get(org_id)
        if view is not None and trio.current_time() - view.loaded_at < self._balance_ttl_s:
            return view
        async with self._lock:  # no flush in between: `pending` matches what is stored
            view = self._views.get(org_id)
            now = trio.current_time()
            if view is not None and now - view.loaded_at < self._balance_ttl_s:
                return view  # another request re-read it while this one waited
            account = await self._ledger.account(org_id)
            if view is None:
                org = await self._orgs.get(org_id)
                view = self._views[org_id] = OrgView(
                    plan=org.plan if org else "free", balance=0, loaded_at=now
                )
            view.balance = account.balance_micros
            view.loaded_at = now
            return view

    # -- the flusher -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                with trio.move_on_after(self._flush_interval_s):
                    await self._wake.wait()
                self._wake = trio.Event()
                await self.flush()
        finally:
            with trio.CancelScope(shield=True):  # stopping: write what is queued
                with trio.move_on_after(10):
                    await self.flush()

    async def flush(self) -> None:
        """Write everything queued so far in one transaction. On failure the batch stays
        queued (in order) and is retried on the next flush."""
        async with self._lock:
            queue = self._queue
            if not queue.charges:
                return
            batch, retry = queue.charges, queue.retry
            self._queue = _Queue()
            try:
                balances = await self._ledger.settle(batch, skip_stored=retry)
            except Exception:
                self.stats.flush_failures += 1
                log.exception("writing %d usage rows failed; retrying", len(batch))
                self._queue = _Queue(batch + self._queue.charges, retry=True)
                return
            self.stats.flushes += 1
            self.stats.rows_written += len(batch)
            flushed: dict[str, int] = {}
            for charge in batch:
                flushed[charge.org_id] = flushed.get(charge.org_id, 0) + charge.micros
            now = trio.current_time()
            for org_id, micros in flushed.items():
                view = self._views.get(org_id)
                if view is not None:
                    view.pending -= micros
                    view.balance = balances[org_id]
                    view.loaded_at = now


def usage_charge(
    *,
    org_id: str,
    key_id: str | None,
    model: str,
    request_id: str,
    micros: int,
    description: str,
    created_at: int,
) -> UsageCharge:
    """A charge with its transaction id fixed now, so a retried flush recognises it."""
    return UsageCharge(
        id=new_id("txn"),
        org_id=org_id,
        key_id=key_id,
        model=model,
        request_id=request_id,
        micros=micros,
        description=description,
        created_at=created_at,
    )
