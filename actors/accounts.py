"""What one instance knows about the balances and key budgets it admits against: a view per
org (`balance` as stored, `pending` settled and not yet written, `reserved` for requests in
flight) and per capped key, re-read at most every `balance_ttl_s` and after each usage write,
always under `lock` (the one the accountant's usage writes and credits take), so a re-read
never misses or double-counts a batch. Also the reservation and its refusals.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import trio

from actors.errors import BudgetExceeded, InsufficientCredits
from actors.shared_holds import SharedHolds
from protocol.billing import KeyBudget, day_of, month_of
from protocol.timefmt import now_us
from storage.ledger import LedgerRepository, Settled, UsageCharge
from storage.orgs import OrgRepository

log = logging.getLogger("gateway.accountant")


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


class Views:
    """The views of the orgs and capped keys this instance has seen. Reads that need I/O
    take `lock`; a stale view is re-read in the background (on `tasks`, while the accountant
    runs) rather than making requests wait."""

    def __init__(self, ledger: LedgerRepository, orgs: OrgRepository, balance_ttl_s: float):
        self._ledger = ledger
        self._orgs = orgs
        self._balance_ttl_s = balance_ttl_s
        self.orgs: dict[str, OrgView] = {}
        self.keys: dict[str, KeyView] = {}
        self.lock = trio.Lock()  # usage writes, balance reads and credits: one at a time
        self.tasks: trio.Nursery | None = None  # while the accountant runs: background re-reads
        self._rereading: set[str] = set()  # orgs whose stale view is being re-read

    def stopped(self) -> None:
        self.tasks = None
        self._rereading.clear()

    def fresh_key(self, key_id: str) -> KeyView | None:
        """The key's view when fresh (usable without I/O), else None."""
        view = self.keys.get(key_id)
        if view is None or trio.current_time() - view.loaded_at >= self._balance_ttl_s:
            return None
        return view

    def usable(self, org_id: str) -> OrgView | None:
        """The org's view when it can be used without I/O: fresh, or stale by age only (not
        invalidated by `refresh`) while the accountant runs, in which case it is re-read in
        the background. Requests never wait for that re-read (they waited behind the flush
        holding the lock: a stall of every request of the org once a second). A stale view
        is still exact for this instance's own spending; what it misses is a change made
        elsewhere (another instance's top-up, a plan change) for one re-read longer."""
        view = self.orgs.get(org_id)
        if view is None:
            return None
        age = trio.current_time() - view.loaded_at
        if age < self._balance_ttl_s:
            return view
        if age == math.inf or self.tasks is None:
            return None
        if org_id not in self._rereading:
            self._rereading.add(org_id)
            self.tasks.start_soon(self._reread, org_id)
        return view

    async def _reread(self, org_id: str) -> None:
        try:
            await self.org(org_id, reread=True)
        except Exception as exc:  # the stale view stays in use; the next request tries again
            log.warning("re-reading the account of %s failed: %s", org_id, exc)
        finally:
            self._rereading.discard(org_id)

    async def org(self, org_id: str, *, reread: bool = False) -> OrgView:
        view = None if reread else self.usable(org_id)
        if view is not None:
            return view
        async with self.lock:  # no flush in between: `pending` matches what is stored
            view = self.orgs.get(org_id)
            now = trio.current_time()
            if view is not None and now - view.loaded_at < self._balance_ttl_s:
                return view  # another request re-read it while this one waited
            account = await self._ledger.account(org_id)
            org = await self._orgs.get(org_id)  # re-read too: the plan (and fee) may change
            plan = org.plan if org else "free"
            if view is None:
                view = self.orgs[org_id] = OrgView(plan=plan, balance=0, loaded_at=now)
            view.plan = plan
            view.balance = account.balance_micros
            view.loaded_at = now
            return view

    async def key(self, key_id: str) -> KeyView:
        view = self.keys.get(key_id)
        if view is not None and trio.current_time() - view.loaded_at < self._balance_ttl_s:
            return view
        async with self.lock:  # as for balances: never between a flush and its bookkeeping
            view = self.keys.get(key_id)
            now = trio.current_time()
            if view is not None and now - view.loaded_at < self._balance_ttl_s:
                return view
            wall = now_us()
            day, month = (await self._ledger.key_spend([key_id], wall))[key_id]
            if view is None:
                view = self.keys[key_id] = KeyView(loaded_at=now)
            view.spent = {day_of(wall).label: day, month_of(wall).label: month}
            view.loaded_at = now
            return view

    def written(self, batch: list[UsageCharge], settled: Settled) -> None:
        """A batch is stored: move its charges from pending to the balances read back (an
        org a retry found all stored is re-read), and its keys' spend likewise."""
        flushed: dict[str, int] = {}
        for charge in batch:
            flushed[charge.org_id] = flushed.get(charge.org_id, 0) + charge.micros
        for org_id, micros in flushed.items():
            view = self.orgs.get(org_id)
            if view is not None:
                view.pending -= micros
                if org_id in settled.balances:
                    view.balance = settled.balances[org_id]
                else:  # a retry found all its rows stored: balance not read back
                    view.loaded_at = -math.inf
        self.flushed_keys(batch, settled.key_spend)

    def flushed_keys(self, batch: list[UsageCharge], totals: dict[tuple[str, str], int]) -> None:
        """Move the batch's key spend from pending to stored (capped keys only have views)."""
        if not self.keys:
            return
        for charge in batch:
            key_view = self.keys.get(charge.key_id) if charge.key_id else None
            if key_view is None:
                continue
            for label in labels(charge.created_at):
                left = key_view.pending.get(label, 0) - charge.micros
                if left:
                    key_view.pending[label] = left
                else:
                    key_view.pending.pop(label, None)
        for (key_id, label), total in totals.items():
            key_view = self.keys.get(key_id)
            if key_view is not None:
                key_view.spent[label] = total

    def key_spend(self, key_id: str, now: int, stored: tuple[int, int]) -> tuple[int, int]:
        """`stored` (today, this month) plus what this instance settled and not yet wrote."""
        view = self.keys.get(key_id)
        if view is None:
            return stored
        day, month = labels(now)
        return stored[0] + view.pending.get(day, 0), stored[1] + view.pending.get(month, 0)

    def refresh(self, org_id: str) -> None:
        """Re-read the org's account (settings changed) on its next request."""
        view = self.orgs.get(org_id)
        if view is not None:
            view.loaded_at = -math.inf

    def refresh_key(self, key_id: str) -> None:
        """Re-read the key's stored spend on its next request (spend was written outside the
        accountant: a training hold or its refund)."""
        view = self.keys.get(key_id)
        if view is not None:
            view.loaded_at = -math.inf

    def pending_micros(self, org_id: str) -> int:
        view = self.orgs.get(org_id)
        return 0 if view is None else view.pending


async def reserve_shared(
    shared: SharedHolds,
    ledger: LedgerRepository,
    plan: str,
    org_id: str,
    micros: int,
    budget: KeyBudget | None,
) -> Reservation:
    """Hold `micros` in Redis, checked against every instance's holds (actors/shared_holds.py);
    InsufficientCredits or BudgetExceeded when they do not fit."""

    async def stored_balance() -> int:
        return (await ledger.account(org_id)).balance_micros

    async def stored_spend() -> tuple[int, int]:
        assert budget is not None
        return (await ledger.key_spend([budget.key_id], now_us()))[budget.key_id]

    refusal = await shared.reserve(
        org_id, micros, budget, stored_balance=stored_balance, stored_spend=stored_spend
    )
    if refusal is not None:
        if refusal.kind == "balance":
            raise InsufficientCredits(org_id, refusal.amount, micros)
        assert budget is not None
        now = now_us()
        period = day_of(now) if refusal.kind == "day" else month_of(now)
        cap = budget.daily_micros if refusal.kind == "day" else budget.monthly_micros
        assert cap is not None
        raise BudgetExceeded(budget, period, cap, refusal.amount, refusal.held)
    key_id = budget.key_id if budget is not None and budget.capped else None
    return Reservation(org_id, plan, micros, key_id=key_id, shared=True)


def labels(created_at: int) -> tuple[str, str]:
    """The UTC day and month labels a charge made at `created_at` counts in."""
    return day_of(created_at).label, month_of(created_at).label
