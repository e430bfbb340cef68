"""The fine-tuning repository on both backends: a job, its first event and its hold written
together; state changes that happen once however many try (events, refunds); leases that one
owner holds at a time and that pass on when they expire; paging."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
import trio

from protocol.fine_tuning.provider import ACTIVE, CANCELLED, FAILED, QUEUED, RUNNING, SUCCEEDED
from protocol.ids import new_id
from storage.fine_tuning import HELD, NO_BILLING, JobRecord, Note
from storage.open import Storage
from storage.usage import DAY_US, HOUR_US

pytestmark = pytest.mark.storage

T0 = 1_800_000_000_000_000
HOLD = 5_000


def new_job(org_id: str, *, created_at: int = T0, hold: int = HOLD) -> JobRecord:
    return JobRecord(
        id=new_id("ftjob"),
        org_id=org_id,
        model="m-2024-01-01",
        provider="sim",
        upstream_model="m-2024-01-01",
        training_file="file_x",
        validation_file=None,
        n_epochs=3,
        batch_size=1,
        learning_rate_multiplier=Decimal("0.1"),
        suffix=None,
        seed=1,
        status=QUEUED,
        byok=False,
        training_usd_per_mtok=Decimal(3),
        fee_percent=Decimal("2.5"),
        hold_micros=hold,
        billing=HELD if hold else NO_BILLING,
        estimated_finish=T0 + 1,
        created_at=created_at,
        updated_at=created_at,
    )


async def org(storage: Storage) -> str:
    return (await storage.orgs.create(new_id("o"))).id


async def training_usage(storage: Storage, org_id: str) -> list[tuple[object, ...]]:
    """The org's usage analytics around T0, by model and provider, read by hour and by day."""
    day = T0 - T0 % DAY_US
    by_hour = await storage.usage.grouped(
        org_id, T0 - T0 % HOUR_US, T0 - T0 % HOUR_US + HOUR_US, ["model", "provider"]
    )
    by_day = await storage.usage.grouped(org_id, day, day + DAY_US, ["model", "provider"])
    got = [(r.model, r.provider, r.requests, r.cost_micros) for r in by_hour]
    assert got == [(r.model, r.provider, r.requests, r.cost_micros) for r in by_day]
    return got


async def test_create_writes_the_job_its_event_and_its_hold(storage: Storage) -> None:
    org_id = await org(storage)
    job = await storage.fine_tuning.create(new_job(org_id), Note("made"), description="hold")
    assert await storage.fine_tuning.get(org_id, job.id) == job
    assert await storage.fine_tuning.get(await org(storage), job.id) is None
    assert (await storage.ledger.account(org_id)).balance_micros == -HOLD
    events = await storage.fine_tuning.events(job.id, limit=10, after=None)
    assert [e.message for e in events.items] == ["made"]
    free = await storage.fine_tuning.create(new_job(org_id, hold=0), Note("x"), description="x")
    assert free.billing == NO_BILLING
    assert (await storage.ledger.account(org_id)).balance_micros == -HOLD


async def test_a_terminal_move_settles_once(storage: Storage) -> None:
    org_id = await org(storage)
    job = await storage.fine_tuning.create(new_job(org_id), Note("made"), description="hold")
    repo = storage.fine_tuning
    assert await repo.move(
        job.id, owner=None, from_=[QUEUED], to=RUNNING, now=T0 + 1, note=Note("run")
    )
    moved = await repo.move(
        job.id,
        owner=None,
        from_=[RUNNING],
        to=SUCCEEDED,
        now=T0 + 2,
        note=Note("done"),
        charge_micros=1_200,
        notify=lambda j: ("fine_tuning.job.succeeded", {"job_id": j.id}),
    )
    assert moved is not None
    record, refund = moved
    assert refund == HOLD - 1_200
    assert (record.billing, record.charged_micros, record.finished_at) == ("settled", 1_200, T0 + 2)
    again = await repo.move(
        job.id, owner=None, from_=list(ACTIVE), to=FAILED, now=T0 + 3, note=Note("x")
    )
    assert again is None
    assert (await storage.ledger.account(org_id)).balance_micros == -1_200
    assert await storage.ledger.sum_rows(org_id) == -1_200
    # The usage analytics count the job as a request of its hour costing what was charged.
    assert await training_usage(storage, org_id) == [("m-2024-01-01", "sim", 1, 1_200)]
    messages = [e.message for e in (await repo.events(job.id, limit=10, after=None)).items]
    assert messages == ["done", "run", "made"]
    kinds = await storage.db.fetch("SELECT type FROM events WHERE org_id = :org", {"org": org_id})
    assert [k["type"] for k in kinds] == ["fine_tuning.job.succeeded"]


async def test_racing_cancels_refund_once(storage: Storage) -> None:
    org_id = await org(storage)
    job = await storage.fine_tuning.create(new_job(org_id), Note("made"), description="hold")
    outcomes: list[object] = []

    async def cancel() -> None:
        outcomes.append(
            await storage.fine_tuning.move(
                job.id,
                owner=None,
                from_=list(ACTIVE),
                to=CANCELLED,
                now=T0 + 5,
                note=Note("cancelled"),
                changes={"provider_cancel": True},
            )
        )

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(cancel)
    assert sum(o is not None for o in outcomes) == 1
    assert (await storage.ledger.account(org_id)).balance_micros == 0
    assert await storage.ledger.sum_rows(org_id) == 0
    assert await training_usage(storage, org_id) == [("m-2024-01-01", "sim", 1, 0)]
    page = await storage.fine_tuning.events(job.id, limit=10, after=None)
    assert [e.message for e in page.items] == ["cancelled", "made"]


async def test_leases_have_one_owner_and_pass_on_when_they_expire(storage: Storage) -> None:
    org_id = await org(storage)
    repo = storage.fine_tuning
    job = await repo.create(new_job(org_id), Note("made"), description="hold")
    [taken] = await repo.claim("a", now=T0, until=T0 + 100, limit=10)
    assert taken.id == job.id and taken.lease_owner == "a"
    assert await repo.claim("b", now=T0 + 99, until=T0 + 199, limit=10) == []
    assert await repo.renew(job.id, "a", until=T0 + 150)
    assert await repo.claim("b", now=T0 + 120, until=T0 + 220, limit=10) == []
    [taken] = await repo.claim("b", now=T0 + 150, until=T0 + 250, limit=10)
    assert taken.lease_owner == "b"
    assert not await repo.renew(job.id, "a", until=T0 + 300)  # a lost it
    assert await repo.record(job.id, "a", provider_job_id="ftjob-x") is None
    assert (
        await repo.move(job.id, owner="a", from_=[QUEUED], to=RUNNING, now=T0, note=Note("stale"))
        is None
    )
    recorded = await repo.record(job.id, "b", provider_job_id="ftjob-x")
    assert recorded is not None and recorded.provider_job_id == "ftjob-x"
    await repo.release(job.id, "a")  # not a's: changes nothing
    assert (await repo.by_id(job.id)) == replace(recorded)
    await repo.release(job.id, "b")
    [taken] = await repo.claim("c", now=T0 + 160, until=T0 + 260, limit=10)
    assert taken.lease_owner == "c"


async def test_ended_jobs_need_no_watcher_unless_the_provider_must_hear_of_a_cancel(
    storage: Storage,
) -> None:
    org_id = await org(storage)
    repo = storage.fine_tuning
    done = await repo.create(new_job(org_id), Note("made"), description="hold")
    await repo.move(done.id, owner=None, from_=[QUEUED], to=FAILED, now=T0, note=Note("f"))
    cancelled = await repo.create(new_job(org_id), Note("made"), description="hold")
    await repo.move(
        cancelled.id,
        owner=None,
        from_=[QUEUED],
        to=CANCELLED,
        now=T0,
        note=Note("c"),
        changes={"provider_cancel": True},
    )
    [taken] = await repo.claim("a", now=T0, until=T0 + 10, limit=10)
    assert taken.id == cancelled.id
    await repo.provider_cancelled(cancelled.id, "a")
    await repo.release(cancelled.id, "a")
    assert await repo.claim("a", now=T0, until=T0 + 10, limit=10) == []


async def test_pages(storage: Storage) -> None:
    org_id = await org(storage)
    repo = storage.fine_tuning
    ids = [
        (await repo.create(new_job(org_id, created_at=T0 + i), Note(f"e{i}"), description="h")).id
        for i in range(5)
    ]
    first = await repo.list(org_id, limit=3, after=None)
    assert [j.id for j in first.items] == ids[::-1][:3] and first.has_more
    rest = await repo.list(org_id, limit=3, after=first.items[-1].id)
    assert [j.id for j in rest.items] == ids[::-1][3:] and not rest.has_more
    assert (await repo.list(await org(storage), limit=3, after=None)).items == []
    assert (await repo.list(org_id, limit=3, after="ftjob_unknown")).items == []
    job_id = ids[0]
    for i in range(3):
        await repo.move(
            job_id,
            owner=None,
            from_=[QUEUED, RUNNING],
            to=RUNNING,
            now=T0 + 10 + i,
            note=Note(f"poll {i}"),
        )
    page = await repo.events(job_id, limit=2, after=None)
    assert [e.message for e in page.items] == ["poll 2", "poll 1"] and page.has_more
    page = await repo.events(job_id, limit=2, after=page.items[-1].id)
    assert [e.message for e in page.items] == ["poll 0", "e0"] and not page.has_more
    after = await repo.events_after(job_id, page.items[-1].seq, limit=10)
    assert [e.message for e in after] == ["poll 0", "poll 1", "poll 2"]
