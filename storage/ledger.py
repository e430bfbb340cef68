"""The credit ledger: an account per organization and a transaction row for every change.

Every change is one atomic `UPDATE … RETURNING` of the balance plus its row (holding
`balance_after`) in the same transaction, so an org's balance always equals the sum of its rows.
Usage is written in batches (`settle`): one transaction for many requests.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from protocol.billing import (
    EXHAUSTED,
    REFUND,
    USAGE,
    KeyBudget,
    Period,
    day_of,
    month_of,
)
from protocol.ids import new_id
from protocol.timefmt import now_us
from storage import events, replenish, usage
from storage.database import Database, Executor, Row
from storage.key_spend import add_key_spend, budget_event_data, claim_alert

_ID_CHUNK = 200  # ids per `IN (...)` lookup (well under SQLite's parameter limit)
_COLUMNS = (
    "id",
    "org_id",
    "type",
    "amount_micros",
    "balance_after_micros",
    "description",
    "model",
    "request_id",
    "key_id",
    "created_at",
)
_PAYMENT_COLUMNS = (*_COLUMNS, "payment_ref")  # usage rows (the hot path) never carry one
REPLENISH_FAILED_EVENT = "billing.auto_replenish_failed"


@dataclass(frozen=True, slots=True)
class Account:
    org_id: str
    balance_micros: int
    lifetime_spend_micros: int
    auto_replenish: bool
    replenish_amount_micros: int | None
    replenish_threshold_micros: int | None
    # Why the last automatic top-up failed (a decline turns auto-replenish off), until it is
    # switched on again.
    replenish_failure: str | None = None


@dataclass(frozen=True, slots=True)
class Transaction:
    id: str
    org_id: str
    type: str
    amount_micros: int
    balance_after_micros: int
    description: str
    model: str | None
    request_id: str | None
    key_id: str | None
    created_at: int
    payment_ref: str | None = None  # the processor's payment a top-up, refund or dispute row is of


@dataclass(frozen=True, slots=True)
class Settled:
    """What a batch left behind: each org's balance, and each key's spend per period label
    (`d:…`/`m:…`) it touched."""

    balances: dict[str, int]
    key_spend: dict[tuple[str, str], int]
    replenish_due: frozenset[str] = frozenset()  # orgs with a top-up due (storage/replenish.py)


@dataclass(slots=True)  # not frozen: one per request, and a frozen __init__ costs ~1 µs more
class UsageCharge:
    """One request's settled charge (positive micro-USD taken from the balance); `id` is its
    transaction's, chosen before it is written so that a retried batch can recognise it."""

    id: str
    org_id: str
    key_id: str | None
    model: str
    request_id: str
    micros: int
    description: str
    created_at: int
    budget: KeyBudget | None = None  # the key's caps, for budget.threshold events
    # The request's `completion.*` event, when one was made: written in the same transaction
    # as the row, so a billed request's event commits with its charge or neither does.
    event: events.NewEvent | None = None
    # For usage analytics (storage/usage.py): the tokens charged, and the provider that
    # answered (None when none did, e.g. a cached answer).
    input_tokens: int = 0
    output_tokens: int = 0
    provider: str | None = None


def _account(row: Row) -> Account:
    return Account(
        org_id=row["org_id"],
        balance_micros=int(row["balance_micros"]),
        lifetime_spend_micros=int(row["lifetime_spend_micros"]),
        auto_replenish=bool(row["auto_replenish"]),
        replenish_amount_micros=_int(row["replenish_amount_micros"]),
        replenish_threshold_micros=_int(row["replenish_threshold_micros"]),
        replenish_failure=row["replenish_failure"],
    )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _transaction(row: Row) -> Transaction:
    return Transaction(
        id=row["id"],
        org_id=row["org_id"],
        type=row["type"],
        amount_micros=int(row["amount_micros"]),
        balance_after_micros=int(row["balance_after_micros"]),
        description=row["description"],
        model=row["model"],
        request_id=row["request_id"],
        key_id=row["key_id"],
        created_at=int(row["created_at"]),
        payment_ref=row["payment_ref"],
    )


async def _ensure_account(tx: Executor, org_id: str) -> None:
    await tx.execute(
        "INSERT INTO credit_accounts (org_id, balance_micros, lifetime_spend_micros,"
        " auto_replenish, updated_at) VALUES (:org_id, 0, 0, FALSE, :now)"
        " ON CONFLICT (org_id) DO NOTHING",
        {"org_id": org_id, "now": now_us()},
    )


class LedgerRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def account(self, org_id: str) -> Account:
        """The org's account, opened (at zero) on first use."""
        row = await self._db.fetchrow(
            "SELECT * FROM credit_accounts WHERE org_id = :org_id", {"org_id": org_id}
        )
        if row is None:
            async with self._db.transaction() as tx:
                await _ensure_account(tx, org_id)
                row = await tx.fetchrow(
                    "SELECT * FROM credit_accounts WHERE org_id = :org_id", {"org_id": org_id}
                )
        assert row is not None
        return _account(row)

    async def apply(
        self,
        org_id: str,
        type: str,
        micros: int,
        description: str,
        *,
        tx: Executor | None = None,
        id: str | None = None,
        key_id: str | None = None,
        payment_ref: str | None = None,
    ) -> Transaction:
        """Add `micros` (negative takes away) to the balance with its row, atomically. With
        `tx`, inside the caller's transaction. With `id`, the row's id: a second apply with it
        raises UniqueViolation and changes nothing (a top-up is credited once). `key_id` names
        the key the row is for (a training hold's; the key's spend is the caller's to add);
        `payment_ref` the processor's payment a top-up, refund or dispute row is of."""
        if tx is None:
            async with self._db.transaction() as own:
                return await self.apply(
                    org_id,
                    type,
                    micros,
                    description,
                    tx=own,
                    id=id,
                    key_id=key_id,
                    payment_ref=payment_ref,
                )
        await _ensure_account(tx, org_id)
        now = now_us()
        # A change that crosses the threshold downwards (a training hold, a negative
        # adjustment) makes a top-up due too; the next usage flush of the org starts it.
        balance = await tx.fetchval(
            "UPDATE credit_accounts SET balance_micros = balance_micros + :micros,"
            f" {replenish.CROSSED}, updated_at = :now WHERE org_id = :org_id"
            " RETURNING balance_micros",
            {"micros": micros, "total": -micros, "now": now, "org_id": org_id},
        )
        row = Transaction(
            id=id or new_id("txn"),
            org_id=org_id,
            type=type,
            amount_micros=micros,
            balance_after_micros=int(balance),
            description=description,
            model=None,
            request_id=None,
            key_id=key_id,
            created_at=now,
            payment_ref=payment_ref,
        )
        values = tuple(getattr(row, c) for c in _PAYMENT_COLUMNS)
        await tx.insert_many("transactions", _PAYMENT_COLUMNS, [values])
        return row

    async def settle(self, charges: Sequence[UsageCharge], *, skip_stored: bool = False) -> Settled:
        """Write a batch of usage charges in one transaction: one balance update per org, a
        row per charge, the charges' completion events (in the batch's order), the keys' day
        and month spend, the budget.threshold events the batch crossed (once per key,
        period and threshold), and the hourly usage counters (storage/usage.py).
        `skip_stored` (a retry after a failure whose outcome is unknown) leaves out charges
        whose rows exist already, so nothing is charged twice; their events, written in the
        same transaction as the rows, are left out with them."""
        balances: dict[str, int] = {}
        due: set[str] = set()
        async with self._db.transaction() as tx:
            if skip_stored:
                stored = await _stored_ids(tx, [c.id for c in charges])
                charges = [c for c in charges if c.id not in stored]
            by_org: dict[str, list[UsageCharge]] = defaultdict(list)
            for charge in charges:
                by_org[charge.org_id].append(charge)
            rows: list[tuple[object, ...]] = []
            for org_id, own in by_org.items():
                await _ensure_account(tx, org_id)
                total = sum(c.micros for c in own)
                updated = await tx.fetchrow(
                    "UPDATE credit_accounts SET balance_micros = balance_micros - :total,"
                    f" lifetime_spend_micros = lifetime_spend_micros + :total, {replenish.CROSSED},"
                    " updated_at = :now WHERE org_id = :org_id"
                    " RETURNING balance_micros, replenish_due",
                    {"total": total, "now": now_us(), "org_id": org_id},
                )
                assert updated is not None
                balance = int(updated["balance_micros"])
                balances[org_id] = balance
                if updated["replenish_due"]:
                    due.add(org_id)
                after = balance + total  # walk forward from the balance before the batch
                for c in own:
                    after -= c.micros
                    rows.append(_usage_values(c, after))
            # Plain tuples, in bulk: a flush costs a few µs a row (docs/performance.md).
            await tx.insert_many("transactions", _COLUMNS, rows)
            completions = [c.event for c in charges if c.event is not None]
            if completions:
                await events.append_many(tx, completions)
            spend = await add_key_spend(tx, charges)
            await usage.add_charges(tx, charges)
        return Settled(balances, spend, frozenset(due))

    async def list(
        self,
        org_id: str,
        *,
        type: str | None = None,
        start_us: int | None = None,
        end_us: int | None = None,
        limit: int,
        offset: int,
    ) -> tuple[list[Transaction], int]:
        """Newest first, and the total matching."""
        where = ["org_id = :org_id"]
        params: dict[str, object] = {"org_id": org_id}
        if type is not None:
            where.append("type = :type")
            params["type"] = type
        if start_us is not None:
            where.append("created_at >= :start")
            params["start"] = start_us
        if end_us is not None:
            where.append("created_at < :end")
            params["end"] = end_us
        clause = " AND ".join(where)
        total = await self._db.fetchval(f"SELECT COUNT(*) FROM transactions WHERE {clause}", params)
        rows = await self._db.fetch(
            f"SELECT * FROM transactions WHERE {clause} ORDER BY seq DESC"
            " LIMIT :limit OFFSET :offset",
            {**params, "limit": limit, "offset": offset},
        )
        return [_transaction(r) for r in rows], int(total)

    async def transaction(self, org_id: str, txn_id: str) -> Transaction | None:
        row = await self._db.fetchrow(
            "SELECT * FROM transactions WHERE id = :id AND org_id = :org_id",
            {"id": txn_id, "org_id": org_id},
        )
        return None if row is None else _transaction(row)

    async def find(self, txn_id: str) -> Transaction | None:
        """A row by id, whichever org's (an operator's refund names only the row)."""
        row = await self._db.fetchrow("SELECT * FROM transactions WHERE id = :id", {"id": txn_id})
        return None if row is None else _transaction(row)

    async def stored_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of `ids` are rows already (the reconciler's question)."""
        return await _stored_ids(self._db, ids)

    async def refunded_micros(self, payment_ref: str) -> int:
        """What refund rows gave back of the payment so far, as a positive amount."""
        value = await self._db.fetchval(
            "SELECT COALESCE(SUM(amount_micros), 0) FROM transactions"
            " WHERE payment_ref = :ref AND type = :type",
            {"ref": payment_ref, "type": REFUND},
        )
        return -int(value)

    async def sum_rows(self, org_id: str) -> int:
        """The sum of every row of the org: equals its balance (the ledger's invariant)."""
        value = await self._db.fetchval(
            "SELECT COALESCE(SUM(amount_micros), 0) FROM transactions WHERE org_id = :org_id",
            {"org_id": org_id},
        )
        return int(value)

    async def usage_between(self, org_id: str, start_us: int, end_us: int) -> int:
        """What usage rows took from the balance in [start, end), as a positive amount."""
        value = await self._db.fetchval(
            "SELECT COALESCE(SUM(amount_micros), 0) FROM transactions WHERE org_id = :org_id"
            " AND type = :type AND created_at >= :start AND created_at < :end",
            {"org_id": org_id, "type": USAGE, "start": start_us, "end": end_us},
        )
        return -int(value)

    async def key_spend(self, key_ids: Iterable[str], now: int) -> dict[str, tuple[int, int]]:
        """Each key's spend today and this month (UTC), in micro-USD."""
        ids = list(dict.fromkeys(key_ids))
        if not ids:
            return {}
        day, month = day_of(now).label, month_of(now).label
        names = {f"k{i}": key for i, key in enumerate(ids)}
        rows = await self._db.fetch(
            f"SELECT key_id, period, micros FROM key_spend WHERE key_id IN"
            f" ({', '.join(':' + n for n in names)}) AND period IN (:day, :month)",
            {**names, "day": day, "month": month},
        )
        spend = {key: [0, 0] for key in ids}
        for r in rows:
            spend[r["key_id"]][0 if r["period"] == day else 1] = int(r["micros"])
        return {key: (d, m) for key, (d, m) in spend.items()}

    async def note_exhausted(
        self, org_id: str, budget: KeyBudget, period: Period, cap: int, spent: int
    ) -> bool:
        """Write `budget.exhausted` for the key and period unless it was written already."""
        async with self._db.transaction() as tx:
            if not await claim_alert(tx, budget.key_id, period.label, EXHAUSTED):
                return False
            data = budget_event_data(budget, period, cap, spent, None)
            await events.append(tx, org_id, "budget.exhausted", data)
            return True

    async def claim_replenish(
        self,
        org_id: str,
        now: int,
        *,
        stale_after_us: int,
        retry_after_us: int,
        max_per_day: int,
    ) -> replenish.Claim:
        """Claim the org's auto top-up if it is due (storage/replenish.py): the amount to
        charge, if any (one winner across instances; at most `max_per_day` a UTC day)."""
        async with self._db.transaction() as tx:  # a write: never on a read connection
            return await replenish.claim(
                tx,
                org_id,
                now,
                stale_after_us=stale_after_us,
                retry_after_us=retry_after_us,
                max_per_day=max_per_day,
            )

    async def end_replenish(self, org_id: str, *, failure: str | None, now: int) -> None:
        """Release the claim; a failure is recorded (and delays the next attempt)."""
        await self._db.execute(
            "UPDATE credit_accounts SET replenish_claimed_at = NULL,"
            " replenish_failed_at = :failed_at, replenish_failure = :failure,"
            " replenish_due = replenish_due OR :declined"  # a decline leaves it due
            " WHERE org_id = :org_id",
            {
                "org_id": org_id,
                "failed_at": None if failure is None else now,
                "failure": failure,
                "declined": failure is not None,
            },
        )

    async def disable_replenish(self, org_id: str, failure: str, data: dict[str, Any]) -> bool:
        """An automatic top-up was declined: switch auto-replenish off with the reason (shown
        on the account until it is switched on again) and write `billing.auto_replenish_failed`
        (`data`) in the same transaction. False, writing nothing, when it was off already."""
        now = now_us()
        async with self._db.transaction() as tx:
            done = await tx.fetchval(
                "UPDATE credit_accounts SET auto_replenish = FALSE, replenish_due = FALSE,"
                " replenish_claimed_at = NULL, replenish_failed_at = :now,"
                " replenish_failure = :failure, updated_at = :now"
                " WHERE org_id = :org_id AND auto_replenish RETURNING org_id",
                {"now": now, "failure": failure, "org_id": org_id},
            )
            if done is None:
                return False
            await events.append(tx, org_id, REPLENISH_FAILED_EVENT, data)
            return True

    async def replenish_state(self, org_id: str) -> tuple[int | None, str | None]:
        """When the last auto-replenish failed and why (None, None after a success)."""
        row = await self._db.fetchrow(
            "SELECT replenish_failed_at, replenish_failure FROM credit_accounts"
            " WHERE org_id = :org_id",
            {"org_id": org_id},
        )
        if row is None:
            return None, None
        return _int(row["replenish_failed_at"]), row["replenish_failure"]

    async def update_settings(self, org_id: str, changes: dict[str, object]) -> Account:
        """Change the auto-replenish settings (columns named as in the table)."""
        allowed = {"auto_replenish", "replenish_amount_micros", "replenish_threshold_micros"}
        assert set(changes) <= allowed, changes
        async with self._db.transaction() as tx:
            await _ensure_account(tx, org_id)
            if changes:
                if changes.get("auto_replenish"):  # on again: the last failure is read
                    changes = {**changes, "replenish_failure": None, "replenish_failed_at": None}
                sets = ", ".join(f"{name} = :{name}" for name in changes)
                await tx.execute(
                    f"UPDATE credit_accounts SET {sets}, updated_at = :now WHERE org_id = :org_id",
                    {**changes, "now": now_us(), "org_id": org_id},
                )
                await replenish.rearm(tx, org_id)
            row = await tx.fetchrow(
                "SELECT * FROM credit_accounts WHERE org_id = :org_id", {"org_id": org_id}
            )
        assert row is not None
        return _account(row)


async def _stored_ids(tx: Executor, ids: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(ids), _ID_CHUNK):
        names = {f"i{i}": value for i, value in enumerate(ids[start : start + _ID_CHUNK])}
        rows = await tx.fetch(
            f"SELECT id FROM transactions WHERE id IN ({', '.join(':' + n for n in names)})",
            names,
        )
        found.update(r["id"] for r in rows)
    return found


def _usage_values(charge: UsageCharge, balance_after: int) -> tuple[object, ...]:
    """A usage row's values, in the order of `_COLUMNS`."""
    return (
        charge.id,
        charge.org_id,
        USAGE,
        -charge.micros,
        balance_after,
        charge.description,
        charge.model,
        charge.request_id,
        charge.key_id,
        charge.created_at,
    )
