"""Fine-tuned models (migration 0012): the result of a succeeded fine-tuning job, registered for
its organization only and routed by its `ft:` name.

`register` is idempotent (the job watcher may register the same result twice after a restart);
`delete` marks the row deleted rather than removing it, so a late second registration of the
same id cannot bring a deleted model back. Reads never show deleted rows or another
organization's."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.timefmt import now_us as wall_clock_us
from storage.database import Database, Row

_COLUMNS = "id, org_id, provider, upstream_model, base_model, job_id, created_at"
_LIVE = "org_id = :org AND deleted_at IS NULL"
_QUALIFIED = ", ".join(f"m.{column}" for column in _COLUMNS.split(", "))


@dataclass(frozen=True, slots=True)
class FineTunedModel:
    id: str  # ft:<base_model>:<org>:<suffix>:<id>
    org_id: str
    provider: str  # the [[providers]] name that trained it
    upstream_model: str  # the provider's own id for it
    base_model: str  # the client-facing base model: its prices apply
    job_id: str
    created_at: int  # µs
    # Whether its job ran with the organization's own provider key (the model then lives in
    # the org's account at the provider); None when its job is not known (registered alone).
    own_key: bool | None = None


def _record(row: Row) -> FineTunedModel:
    return FineTunedModel(
        id=row["id"],
        org_id=row["org_id"],
        provider=row["provider"],
        upstream_model=row["upstream_model"],
        base_model=row["base_model"],
        job_id=row["job_id"],
        created_at=int(row["created_at"]),
        own_key=None if row.get("own_key") is None else bool(row["own_key"]),
    )


class FineTunedModelRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def register(
        self,
        *,
        model_id: str,
        org_id: str,
        provider: str,
        upstream_model: str,
        base_model: str,
        job_id: str,
        created_at_us: int,
    ) -> None:
        """Record a model; registering an id that exists (live or deleted) changes nothing."""
        await self._db.execute(
            f"INSERT INTO fine_tuned_models ({_COLUMNS}) VALUES (:id, :org, :provider,"
            " :upstream, :base, :job, :created_at) ON CONFLICT (id) DO NOTHING",
            {
                "id": model_id,
                "org": org_id,
                "provider": provider,
                "upstream": upstream_model,
                "base": base_model,
                "job": job_id,
                "created_at": created_at_us,
            },
        )

    async def get(self, org_id: str, model_id: str) -> FineTunedModel | None:
        """The org's live model `model_id`, with whether its job used the org's own key; None
        when absent, deleted or another org's."""
        if "\x00" in model_id:
            return None  # no id holds one (PostgreSQL text cannot)
        row = await self._db.fetchrow(
            f"SELECT {_QUALIFIED}, j.byok AS own_key FROM fine_tuned_models m"
            " LEFT JOIN fine_tuning_jobs j ON j.id = m.job_id"
            " WHERE m.id = :id AND m.org_id = :org AND m.deleted_at IS NULL",
            {"id": model_id, "org": org_id},
        )
        return None if row is None else _record(row)

    async def list(self, org_id: str) -> list[FineTunedModel]:
        """The org's live models, oldest first."""
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM fine_tuned_models WHERE {_LIVE} ORDER BY created_at, id",
            {"org": org_id},
        )
        return [_record(r) for r in rows]

    async def delete(
        self, org_id: str, model_id: str, *, now_us: int | None = None
    ) -> FineTunedModel | None:
        """Mark the org's live model deleted; returns it, or None when there was none (absent,
        already deleted, another org's). Exactly one of concurrent deletes gets the record."""
        if "\x00" in model_id:
            return None
        async with self._db.transaction() as tx:
            row = await tx.fetchrow(
                f"UPDATE fine_tuned_models SET deleted_at = :now WHERE id = :id AND {_LIVE}"
                f" RETURNING {_COLUMNS}",
                {
                    "id": model_id,
                    "org": org_id,
                    "now": wall_clock_us() if now_us is None else now_us,
                },
            )
        return None if row is None else _record(row)
