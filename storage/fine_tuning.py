"""Fine-tuning jobs, their events and the watchers' leases (migration 0011).

Every change of a job's state is one conditional `UPDATE … WHERE status IN (…)` plus its event
row (and, for a terminal state, the ledger rows and the webhook event) in one transaction, so
two watchers — or a watcher and a cancel — can never both move a job, write an event twice or
refund a hold twice. The hold is a `usage` row written with the job (`txn_<job id>_hold`); the
end writes at most one `refund` row (`…_settle`: what was held beyond the charge, or
`…_release`: all of it), whose fixed ids make a repeat impossible (docs/fine_tuning.md).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any

import msgspec

from protocol.billing import REFUND, USAGE, KeyBudget
from protocol.fine_tuning.provider import ACTIVE, CANCELLED, TERMINAL
from protocol.ids import new_id
from storage import events, usage
from storage.database import Database, Executor, Row
from storage.key_spend import add_key_spend, take_key_spend
from storage.ledger import LedgerRepository, UsageCharge
from storage.pages import Page

HELD = "held"
SETTLED = "settled"
RELEASED = "released"
NO_BILLING = "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    """One job's row. The fields with defaults are what the watcher fills in later."""

    id: str
    org_id: str
    model: str
    provider: str
    upstream_model: str
    training_file: str
    validation_file: str | None
    n_epochs: int
    batch_size: int
    learning_rate_multiplier: Decimal
    suffix: str | None
    seed: int
    status: str
    fine_tuned_model: str | None = None
    provider_job_id: str | None = None
    provider_training_file: str | None = None
    provider_validation_file: str | None = None
    provider_model: str | None = None
    dataset_tokens: int | None = None
    trained_tokens: int | None = None
    error_code: str | None = None
    error_message: str | None = None
    error_param: str | None = None
    byok: bool
    training_usd_per_mtok: Decimal | None
    fee_percent: Decimal
    hold_micros: int
    charged_micros: int | None = None
    billing: str
    provider_cancel: bool = False
    estimated_finish: int
    created_at: int
    updated_at: int
    finished_at: int | None = None
    lease_owner: str | None = None
    lease_expires_at: int | None = None
    # The key that created the job: the training hold counts in its spend (day and month of
    # `created_at`) and a refund takes back what was not charged. None for older jobs.
    key_id: str | None = None


_FIELDS = tuple(f.name for f in fields(JobRecord))
_COLUMNS = ", ".join(_FIELDS)
_INTS = frozenset(
    {
        "n_epochs",
        "batch_size",
        "seed",
        "hold_micros",
        "estimated_finish",
        "created_at",
        "updated_at",
    }
)
_OPT_INTS = frozenset(
    {"dataset_tokens", "trained_tokens", "charged_micros", "finished_at", "lease_expires_at"}
)

_DECIMALS = ("learning_rate_multiplier", "training_usd_per_mtok", "fee_percent")


def _record(row: Row) -> JobRecord:
    values: dict[str, Any] = {}
    for name in _FIELDS:
        value = row[name]
        if name in _INTS:
            value = int(value)
        elif name in _OPT_INTS:
            value = None if value is None else int(value)
        elif name in ("byok", "provider_cancel"):
            value = bool(value)
        elif name in _DECIMALS:
            value = None if value is None else Decimal(value)
        values[name] = value
    return JobRecord(**values)


def _params(record: JobRecord) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(record, name) for name in _FIELDS}
    for name in _DECIMALS:
        out[name] = None if out[name] is None else str(out[name])
    return out


@dataclass(frozen=True, slots=True)
class JobEventRecord:
    seq: int
    id: str
    job_id: str
    org_id: str
    level: str
    message: str
    data: dict[str, Any] | None
    created_at: int


def _event(row: Row) -> JobEventRecord:
    data = row["data"]
    return JobEventRecord(
        seq=int(row["seq"]),
        id=row["id"],
        job_id=row["job_id"],
        org_id=row["org_id"],
        level=row["level"],
        message=row["message"],
        data=None if data is None else msgspec.json.decode(data),
        created_at=int(row["created_at"]),
    )


@dataclass(frozen=True, slots=True)
class Note:
    """An event to write with a change."""

    message: str
    level: str = "info"
    data: dict[str, Any] | None = None


# A terminal change may add a webhook event: (type, data) made from the job as it now is.
Notify = Callable[[JobRecord], tuple[str, dict[str, Any]]]


def hold_id(job_id: str) -> str:
    return f"txn_{job_id}_hold"


def settle_id(job_id: str) -> str:
    return f"txn_{job_id}_settle"


def release_id(job_id: str) -> str:
    return f"txn_{job_id}_release"


def _in(prefix: str, values: Sequence[str]) -> tuple[str, dict[str, str]]:
    names = {f"{prefix}{i}": v for i, v in enumerate(values)}
    return ", ".join(":" + n for n in names), names


async def _add_event(tx: Executor, job: JobRecord, note: Note, now: int) -> None:
    await tx.execute(
        "INSERT INTO fine_tuning_events (id, job_id, org_id, level, message, data, created_at)"
        " VALUES (:id, :job, :org, :level, :message, :data, :now)",
        {
            "id": new_id("ftevent"),
            "job": job.id,
            "org": job.org_id,
            "level": note.level,
            "message": note.message,
            "data": None if note.data is None else events.encode_data(note.data),
            "now": now,
        },
    )


class FineTuningRepository:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._ledger = LedgerRepository(db)

    # -- creation and reads ------------------------------------------------------------------

    async def create(
        self, job: JobRecord, note: Note, *, description: str, budget: KeyBudget | None = None
    ) -> JobRecord:
        """Insert the job, its first event and (when `hold_micros` > 0) the hold's ledger row
        and its key's spend (with the budget.threshold events it crosses, given the key's
        `budget`), in one transaction."""
        async with self._db.transaction() as tx:
            names = ", ".join(":" + n for n in _FIELDS)
            await tx.execute(
                f"INSERT INTO fine_tuning_jobs ({_COLUMNS}) VALUES ({names})", _params(job)
            )
            await _add_event(tx, job, note, job.created_at)
            if job.hold_micros > 0:
                txn = await self._ledger.apply(
                    job.org_id,
                    USAGE,
                    -job.hold_micros,
                    description,
                    tx=tx,
                    id=hold_id(job.id),
                    key_id=job.key_id,
                )
                hold = UsageCharge(
                    txn.id,
                    job.org_id,
                    job.key_id,
                    job.model,
                    job.id,
                    job.hold_micros,
                    description,
                    job.created_at,
                    budget,
                    provider=job.provider,
                )
                if job.key_id is not None:
                    await add_key_spend(tx, [hold])
                await usage.add_charges(tx, [hold])  # a request of its hour, as any spend
        return job

    async def get(self, org_id: str, job_id: str) -> JobRecord | None:
        """The org's job; None for a missing one and for another org's alike."""
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM fine_tuning_jobs WHERE id = :id AND org_id = :org",
            {"id": job_id, "org": org_id},
        )
        return None if row is None else _record(row)

    async def by_id(self, job_id: str) -> JobRecord | None:
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM fine_tuning_jobs WHERE id = :id", {"id": job_id}
        )
        return None if row is None else _record(row)

    async def list(self, org_id: str, *, limit: int, after: str | None) -> Page[JobRecord]:
        """Newest first; `after` is the id of the last job of the previous page (an unknown
        id, or another org's, gives an empty page)."""
        params: dict[str, Any] = {"org": org_id, "limit": limit + 1}
        where = "org_id = :org"
        if after is not None:
            anchor = await self._db.fetchrow(
                "SELECT created_at FROM fine_tuning_jobs WHERE id = :id AND org_id = :org",
                {"id": after, "org": org_id},
            )
            if anchor is None:
                return Page([], False)
            where += " AND (created_at < :at OR (created_at = :at AND id < :after))"
            params |= {"at": int(anchor["created_at"]), "after": after}
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM fine_tuning_jobs WHERE {where}"
            " ORDER BY created_at DESC, id DESC LIMIT :limit",
            params,
        )
        items = [_record(r) for r in rows]
        return Page(items[:limit], len(items) > limit)

    async def events(self, job_id: str, *, limit: int, after: str | None) -> Page[JobEventRecord]:
        """A job's events newest first; `after` is the id of the last event of the previous
        page."""
        params: dict[str, Any] = {"job": job_id, "limit": limit + 1}
        where = "job_id = :job"
        if after is not None:
            seq = await self._db.fetchval(
                "SELECT seq FROM fine_tuning_events WHERE id = :id AND job_id = :job",
                {"id": after, "job": job_id},
            )
            if seq is None:
                return Page([], False)
            where += " AND seq < :seq"
            params["seq"] = int(seq)
        rows = await self._db.fetch(
            f"SELECT * FROM fine_tuning_events WHERE {where} ORDER BY seq DESC LIMIT :limit",
            params,
        )
        items = [_event(r) for r in rows]
        return Page(items[:limit], len(items) > limit)

    async def events_after(
        self, job_id: str, seq: int, *, limit: int
    ) -> builtins.list[JobEventRecord]:
        """A job's events after `seq`, oldest first (the SSE stream)."""
        rows = await self._db.fetch(
            "SELECT * FROM fine_tuning_events WHERE job_id = :job AND seq > :seq"
            " ORDER BY seq LIMIT :limit",
            {"job": job_id, "seq": seq, "limit": limit},
        )
        return [_event(r) for r in rows]

    # -- leases ------------------------------------------------------------------------------

    async def claim(
        self, owner: str, *, now: int, until: int, limit: int
    ) -> builtins.list[JobRecord]:
        """Take the lease of jobs that need a watcher (active, or cancelled here and not yet at
        the provider) and that nobody holds or whose holder let the lease expire."""
        active, names = _in("s", ACTIVE)
        rows = await self._db.fetch(
            "SELECT id FROM fine_tuning_jobs"
            f" WHERE (status IN ({active}) OR (status = :cancelled AND provider_cancel))"
            " AND (lease_owner IS NULL OR lease_expires_at <= :now)"
            " ORDER BY created_at LIMIT :limit",
            {**names, "cancelled": CANCELLED, "now": now, "limit": limit},
        )
        taken: builtins.list[JobRecord] = []
        for row in rows:
            async with self._db.transaction() as tx:
                got = await tx.fetchrow(
                    "UPDATE fine_tuning_jobs SET lease_owner = :owner, lease_expires_at = :until"
                    " WHERE id = :id AND (lease_owner IS NULL OR lease_expires_at <= :now)"
                    f" RETURNING {_COLUMNS}",
                    {"owner": owner, "until": until, "id": row["id"], "now": now},
                )
            if got is not None:
                taken.append(_record(got))
        return taken

    async def renew(self, job_id: str, owner: str, *, until: int) -> bool:
        changed = await self._db.execute(
            "UPDATE fine_tuning_jobs SET lease_expires_at = :until"
            " WHERE id = :id AND lease_owner = :owner",
            {"until": until, "id": job_id, "owner": owner},
        )
        return changed == 1

    async def release(self, job_id: str, owner: str) -> None:
        await self._db.execute(
            "UPDATE fine_tuning_jobs SET lease_owner = NULL, lease_expires_at = NULL"
            " WHERE id = :id AND lease_owner = :owner",
            {"id": job_id, "owner": owner},
        )

    # -- changes -----------------------------------------------------------------------------

    async def record(self, job_id: str, owner: str, **changes: Any) -> JobRecord | None:
        """Store what the watcher learnt (provider ids) whatever the job's state (a cancel may
        have come in between); None when `owner` no longer holds the lease."""
        sets = ", ".join(f"{name} = :{name}" for name in changes)
        async with self._db.transaction() as tx:
            row = await tx.fetchrow(
                f"UPDATE fine_tuning_jobs SET {sets} WHERE id = :id AND lease_owner = :owner"
                f" RETURNING {_COLUMNS}",
                {**changes, "id": job_id, "owner": owner},
            )
        return None if row is None else _record(row)

    async def move(
        self,
        job_id: str,
        *,
        owner: str | None,
        from_: Sequence[str],
        to: str,
        now: int,
        note: Note,
        changes: dict[str, Any] | None = None,
        charge_micros: int | None = None,
        notify: Notify | None = None,
    ) -> tuple[JobRecord, int] | None:
        """Move the job from one of `from_` to `to` with its event, as `owner` (the lease
        holder; None: a client's cancel). A terminal `to` also closes the bill: `charge_micros`
        settles (the hold beyond it is refunded), None releases the whole hold. Returns the
        job and the balance change made (0 or the refund), or None when the job was not in
        `from_` (or the lease is lost): someone else moved it first."""
        states, names = _in("f", from_)
        params: dict[str, Any] = {**names, **(changes or {}), "to": to, "now": now, "id": job_id}
        sets = "".join(f", {name} = :{name}" for name in changes or {})
        if to in TERMINAL:
            sets += ", finished_at = :now"
        where = f"id = :id AND status IN ({states})"
        if owner is not None:
            where += " AND lease_owner = :owner"
            params["owner"] = owner
        async with self._db.transaction() as tx:
            row = await tx.fetchrow(
                f"UPDATE fine_tuning_jobs SET status = :to, updated_at = :now{sets}"
                f" WHERE {where} RETURNING {_COLUMNS}",
                params,
            )
            if row is None:
                return None
            job = _record(row)
            refund = 0
            if to in TERMINAL and job.billing == HELD:
                job, refund = await self._close_bill(tx, job, charge_micros)
            await _add_event(tx, job, note, now)
            if notify is not None:
                type, data = notify(job)
                await events.append(tx, job.org_id, type, data)
        return job, refund

    async def _close_bill(
        self, tx: Executor, job: JobRecord, charge: int | None
    ) -> tuple[JobRecord, int]:
        if charge is None:
            refund, state, txn, what = job.hold_micros, RELEASED, release_id(job.id), "released"
        else:
            charge = min(charge, job.hold_micros)
            refund, state, txn, what = (
                job.hold_micros - charge,
                SETTLED,
                settle_id(job.id),
                "settled",
            )
        if refund > 0:
            await self._ledger.apply(
                job.org_id,
                REFUND,
                refund,
                f"fine-tuning job {job.id}: training hold {what}",
                tx=tx,
                id=txn,
                key_id=job.key_id,
            )
            if job.key_id is not None:
                await take_key_spend(tx, job.key_id, refund, job.created_at)
            await usage.take_back(
                tx, job.org_id, job.created_at, job.key_id, job.model, job.provider, refund
            )
        row = await tx.fetchrow(
            "UPDATE fine_tuning_jobs SET billing = :state, charged_micros = :charged"
            f" WHERE id = :id RETURNING {_COLUMNS}",
            {"state": state, "charged": 0 if charge is None else charge, "id": job.id},
        )
        assert row is not None
        return _record(row), refund

    async def provider_cancelled(self, job_id: str, owner: str) -> None:
        """The provider was told of the cancel (or there was nothing to tell)."""
        await self._db.execute(
            "UPDATE fine_tuning_jobs SET provider_cancel = FALSE"
            " WHERE id = :id AND lease_owner = :owner",
            {"id": job_id, "owner": owner},
        )
