"""Mirror results (migration 0020): batches written once (a retry skips stored rows), figures
read without answers, and the retention bound (age, rows per pair)."""

from __future__ import annotations

import dataclasses

import pytest

from storage.mirror_results import MirrorResult, MirrorResultRepository
from storage.open import Storage

pytestmark = pytest.mark.storage


def _row(org_id: str, n: int, *, model: str = "small", shadow: str = "haiku") -> MirrorResult:
    return MirrorResult(
        id=f"mir_{n:06d}{model}{shadow}",
        org_id=org_id,
        key_id=None,
        request_id=f"req_{n}",
        route="chat",
        model=model,
        shadow=shadow,
        created_at=1_000_000 * n,
        billed=n % 2 == 0,
        primary_latency_ms=1.5 * n,
        primary_prompt_tokens=n,
        primary_completion_tokens=2 * n,
        primary_cost_usd=0.001 * n,
        outcome="ok" if n % 3 else "http_503",
        shadow_latency_ms=2.5 * n,
        shadow_prompt_tokens=n + 1,
        shadow_completion_tokens=2 * n + 1,
        shadow_cost_usd=0.002 * n,
        answers_equal=None if n % 3 == 0 else n % 2 == 0,
        shadow_answer_sealed=None if n % 3 == 0 else f"v1:sealed-{n}",
    )


async def test_a_batch_is_written_once_and_reads_back_whole(storage: Storage) -> None:
    org = await storage.orgs.create("mirrors")
    repo = MirrorResultRepository(storage.db)
    rows = [_row(org.id, n) for n in range(1, 7)]
    assert await repo.write_batch(rows[:4]) == 4
    assert await repo.write_batch(rows, skip_stored=True) == 2  # a retried batch
    assert await repo.for_request("req_5") == [rows[4]]
    figures = await repo.figures()
    assert [f.primary_latency_ms for f in figures] == [1.5 * n for n in range(1, 7)]
    assert [f.answers_equal for f in figures] == [r.answers_equal for r in rows]
    assert not any(hasattr(f, "shadow_answer_sealed") for f in figures)
    assert [f.outcome for f in await repo.figures(since_us=5_000_000)] == ["ok", "http_503"]


async def test_retention_removes_old_rows_and_rows_past_the_bound_per_pair(
    storage: Storage,
) -> None:
    org = await storage.orgs.create("mirrors")
    repo = MirrorResultRepository(storage.db)
    rows = [_row(org.id, n) for n in range(1, 21)]
    rows += [_row(org.id, n, shadow="other") for n in range(1, 6)]
    await repo.write_batch(rows)
    # Older than 3 s: rows 1 and 2 of both pairs; then haiku keeps its 10 most recent.
    assert await repo.prune(older_than_us=3_000_000, max_rows_per_pair=10) == 2 + 2 + 8
    left = await repo.figures()
    haiku = [f.primary_prompt_tokens for f in left if f.shadow == "haiku"]
    assert haiku == list(range(11, 21))
    assert [f.primary_prompt_tokens for f in left if f.shadow == "other"] == [3, 4, 5]
    assert await repo.prune(older_than_us=3_000_000, max_rows_per_pair=10) == 0


async def test_a_row_id_is_unique(storage: Storage) -> None:
    org = await storage.orgs.create("mirrors")
    repo = MirrorResultRepository(storage.db)
    row = _row(org.id, 1)
    await repo.write_batch([row])
    from storage import UniqueViolation

    with pytest.raises(UniqueViolation):
        await repo.write_batch([dataclasses.replace(row, request_id="req_other")])
