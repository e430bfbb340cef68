"""The hourly usage counters on every backend: written with the ledger's usage rows (settle)
and with the events of requests that failed without a charge, summed per group on read."""

from __future__ import annotations

from datetime import datetime

from protocol.billing import USAGE
from protocol.ids import new_id
from protocol.timefmt import from_datetime
from storage.events import new_event
from storage.ledger import UsageCharge
from storage.open import Storage
from storage.usage import HOUR_US, FailedRequest

NOON = from_datetime(datetime(2026, 11, 22, 12))
FIELDS = ("key_id", "model", "provider", "day", "hour")


def charge(
    org_id: str,
    micros: int,
    *,
    at: int = NOON,
    key: str | None = "key_1",
    model: str = "small",
    provider: str | None = "sim",
    tokens: tuple[int, int] = (10, 5),
    failed: bool = False,
) -> UsageCharge:
    event = None
    if failed:  # a stream the client left: charged, and a completion.error
        event = new_event(org_id, "completion.error", {}, failed=FailedRequest(key, model, None))
    return UsageCharge(
        id=new_id("txn"),
        org_id=org_id,
        key_id=key,
        model=model,
        request_id=new_id("req"),
        micros=micros,
        description="chat completion",
        created_at=at,
        event=event,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        provider=provider,
    )


def totals(rows: list[object]) -> tuple[int, int, int, int, int]:
    return (
        sum(r.requests for r in rows),  # type: ignore[attr-defined]
        sum(r.input_tokens for r in rows),  # type: ignore[attr-defined]
        sum(r.output_tokens for r in rows),  # type: ignore[attr-defined]
        sum(r.cost_micros for r in rows),  # type: ignore[attr-defined]
        sum(r.errors for r in rows),  # type: ignore[attr-defined]
    )


async def test_settle_adds_counters_per_hour_key_model_and_provider(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    other = await storage.orgs.create("b")
    batch = [
        charge(org.id, 100),
        charge(org.id, 200, tokens=(1, 2)),
        charge(org.id, 7, key="key_2", model="haiku", provider="claude"),
        charge(org.id, 30, at=NOON + HOUR_US - 1, failed=True),
        charge(org.id, 40, at=NOON + HOUR_US, key=None, provider=None),
        charge(other.id, 999),
    ]
    await storage.ledger.settle(batch[:3])
    await storage.ledger.settle(batch[3:])
    rows = await storage.usage.grouped(org.id, NOON, NOON + 2 * HOUR_US, FIELDS[:3] + ("hour",))
    got = [
        (r.hour, r.key_id, r.model, r.provider, r.requests, r.input_tokens, r.output_tokens,
         r.cost_micros, r.errors)
        for r in rows
    ]  # fmt: skip
    assert got == [
        (NOON, "key_1", "small", "sim", 3, 21, 12, 330, 1),
        (NOON, "key_2", "haiku", "claude", 1, 10, 5, 7, 0),
        (NOON + HOUR_US, None, "small", None, 1, 10, 5, 40, 0),
    ]
    # The ledger's usage rows of the org sum to the same cost.
    listed, _ = await storage.ledger.list(org.id, type=USAGE, limit=100, offset=0)
    assert -sum(t.amount_micros for t in listed) == totals(rows)[3] == 377
    [whole] = await storage.usage.grouped(org.id, NOON, NOON + 2 * HOUR_US, [])
    assert (whole.key_id, whole.model, whole.day, whole.hour) == (None, None, None, None)
    assert totals([whole]) == (5, 41, 22, 377, 1)
    [day] = await storage.usage.grouped(org.id, 0, NOON * 2, ["day"])
    assert day.day == from_datetime(datetime(2026, 11, 22)) and totals([day])[3] == 377
    # [start, end): the hour starting at `end` is out, the one at `start` in.
    assert totals(await storage.usage.grouped(org.id, NOON, NOON + HOUR_US, []))[3] == 337
    assert totals(await storage.usage.grouped(org.id, NOON + HOUR_US, NOON * 2, []))[3] == 40
    assert totals(await storage.usage.grouped(other.id, 0, NOON * 2, []))[3] == 999
    # Nothing grouped and nothing there: one row of zeros; grouped: no row.
    assert totals(await storage.usage.grouped(org.id, 0, HOUR_US, [])) == (0, 0, 0, 0, 0)
    assert await storage.usage.grouped(org.id, 0, HOUR_US, ["model"]) == []


async def test_a_retried_settle_counts_nothing_twice(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    batch = [charge(org.id, 100), charge(org.id, 50)]
    await storage.ledger.settle(batch[:1])
    await storage.ledger.settle(batch, skip_stored=True)  # the first was stored already
    [row] = await storage.usage.grouped(org.id, NOON, NOON + HOUR_US, [])
    assert totals([row]) == (2, 20, 10, 150, 0)


async def test_failed_requests_are_counted_with_their_events(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    failed = FailedRequest("key_1", "small", "sim")
    error = new_event(org.id, "completion.error", {"status": 502}, failed=failed)
    anonymous = new_event(org.id, "completion.error", {}, failed=FailedRequest(None, None, None))
    success = new_event(org.id, "completion.success", {})  # not a failure: not counted
    assert await storage.events.write_batch([error, anonymous, success]) == 3
    # A retry of the same batch (outcome unknown) writes and counts nothing again.
    assert await storage.events.write_batch([error, anonymous], skip_stored=True) == 0
    hour = error.created_at - error.created_at % HOUR_US
    rows = await storage.usage.grouped(org.id, hour, hour + HOUR_US, ["key_id", "model"])
    got = [(r.key_id, r.model, r.requests, r.errors, r.cost_micros) for r in rows]
    assert got == [(None, None, 1, 1, 0), ("key_1", "small", 1, 1, 0)]
