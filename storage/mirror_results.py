"""Shadow calls' results (migration 0020, docs/mirroring.md): one row per call a mirrored
request made to a shadow model, with the primary's and the shadow's figures side by side.

Written in batches by the mirror's results writer (actors/mirror.py); read back as figures
only (`figures`: no answer leaves through it) for GET /v1/admin/mirrors; kept within a
retention bound by `prune`. The shadow's answer is stored sealed (sealing is the caller's:
services/mirror.py); nothing here holds text in clear.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields

from storage.database import Database, Row

_ID_CHUNK = 200  # ids per `IN (...)` lookup (well under SQLite's parameter limit)


@dataclass(frozen=True, slots=True)
class MirrorResult:
    """One row, in the table's column order."""

    id: str  # mir_<ordered id>: fixed when made, so a retried batch recognises its rows
    org_id: str
    key_id: str | None
    request_id: str
    route: str
    model: str
    shadow: str
    created_at: int  # µs
    billed: bool
    primary_latency_ms: float
    primary_prompt_tokens: int
    primary_completion_tokens: int
    primary_cost_usd: float
    outcome: str  # "ok" or an error code
    shadow_latency_ms: float
    shadow_prompt_tokens: int
    shadow_completion_tokens: int
    shadow_cost_usd: float
    answers_equal: bool | None  # None: not comparable
    shadow_answer_sealed: str | None

    def __repr__(self) -> str:
        return (
            f"MirrorResult(id={self.id!r}, model={self.model!r}, shadow={self.shadow!r},"
            f" outcome={self.outcome!r}, answer=***)"
        )


COLUMNS = tuple(f.name for f in fields(MirrorResult))


@dataclass(frozen=True, slots=True)
class Figures:
    """What the comparison reads of a row: its numbers, never its answer."""

    model: str
    shadow: str
    outcome: str
    primary_latency_ms: float
    primary_prompt_tokens: int
    primary_completion_tokens: int
    primary_cost_usd: float
    shadow_latency_ms: float
    shadow_prompt_tokens: int
    shadow_completion_tokens: int
    shadow_cost_usd: float
    answers_equal: bool | None


_FIGURES = tuple(f.name for f in fields(Figures))


def _figures(row: Row) -> Figures:
    equal = row["answers_equal"]
    return Figures(
        model=row["model"],
        shadow=row["shadow"],
        outcome=row["outcome"],
        primary_latency_ms=float(row["primary_latency_ms"]),
        primary_prompt_tokens=int(row["primary_prompt_tokens"]),
        primary_completion_tokens=int(row["primary_completion_tokens"]),
        primary_cost_usd=float(row["primary_cost_usd"]),
        shadow_latency_ms=float(row["shadow_latency_ms"]),
        shadow_prompt_tokens=int(row["shadow_prompt_tokens"]),
        shadow_completion_tokens=int(row["shadow_completion_tokens"]),
        shadow_cost_usd=float(row["shadow_cost_usd"]),
        answers_equal=None if equal is None else bool(equal),
    )


def _result(row: Row) -> MirrorResult:
    equal = row["answers_equal"]
    values = {
        **row,
        "billed": bool(row["billed"]),
        "answers_equal": None if equal is None else bool(equal),
    }
    for name in ("primary_latency_ms", "primary_cost_usd", "shadow_latency_ms", "shadow_cost_usd"):
        values[name] = float(values[name])
    return MirrorResult(**values)


def _values(result: MirrorResult) -> tuple[object, ...]:
    values = list(astuple(result))
    for name in ("primary_latency_ms", "primary_cost_usd", "shadow_latency_ms", "shadow_cost_usd"):
        index = COLUMNS.index(name)
        values[index] = float(values[index])  # PostgreSQL float8
    return tuple(values)


class MirrorResultRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def write_batch(self, batch: Sequence[MirrorResult], *, skip_stored: bool = False) -> int:
        """Write `batch` in one transaction; how many rows went in. `skip_stored` (a retry
        after a failure whose outcome is unknown) leaves out the rows already stored."""
        if not batch:
            return 0
        async with self._db.transaction() as tx:
            if skip_stored:
                stored: set[str] = set()
                ids = [r.id for r in batch]
                for start in range(0, len(ids), _ID_CHUNK):
                    names = {f"i{i}": v for i, v in enumerate(ids[start : start + _ID_CHUNK])}
                    rows = await tx.fetch(
                        "SELECT id FROM mirror_results WHERE id IN"
                        f" ({', '.join(':' + n for n in names)})",
                        names,
                    )
                    stored.update(r["id"] for r in rows)
                batch = [r for r in batch if r.id not in stored]
            if batch:
                await tx.insert_many("mirror_results", COLUMNS, [_values(r) for r in batch])
        return len(batch)

    async def figures(self, *, since_us: int | None = None) -> list[Figures]:
        """Every retained row's figures (at or after `since_us`), by pair then time. The
        retention bound keeps this to at most `max_rows_per_pair` rows a pair."""
        where, params = "", {}
        if since_us is not None:
            where, params = " WHERE created_at >= :since", {"since": since_us}
        rows = await self._db.fetch(
            f"SELECT {', '.join(_FIGURES)} FROM mirror_results{where}"
            " ORDER BY model, shadow, created_at",
            params,
        )
        return [_figures(r) for r in rows]

    async def for_request(self, request_id: str) -> list[MirrorResult]:
        """The whole rows of one primary request (answers still sealed), oldest first."""
        rows = await self._db.fetch(
            f"SELECT {', '.join(COLUMNS)} FROM mirror_results WHERE request_id = :r ORDER BY id",
            {"r": request_id},
        )
        return [_result(row) for row in rows]

    async def prune(self, *, older_than_us: int, max_rows_per_pair: int) -> int:
        """Delete the rows created before `older_than_us`, then, per (model, shadow), those
        older than its `max_rows_per_pair` most recent; how many went. Safe on several
        instances at once (each row is deleted by one statement, once)."""
        removed = await self._db.execute(
            "DELETE FROM mirror_results WHERE created_at < :cutoff", {"cutoff": older_than_us}
        )
        pairs = await self._db.fetch("SELECT DISTINCT model, shadow FROM mirror_results")
        for pair in pairs:
            params = {"model": pair["model"], "shadow": pair["shadow"], "keep": max_rows_per_pair}
            removed += await self._db.execute(
                "DELETE FROM mirror_results WHERE model = :model AND shadow = :shadow"
                " AND created_at <= (SELECT created_at FROM mirror_results"
                " WHERE model = :model AND shadow = :shadow"
                " ORDER BY created_at DESC LIMIT 1 OFFSET :keep)",
                params,
            )
        return removed
