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
from storage.usage import DAY_US, HOUR_US, SUMS, FailedRequest, UsageRow, UsageTable

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


def totals(table: UsageTable) -> tuple[int, int, int, int, int]:
    rows = table.as_dicts()
    return (
        sum(r["requests"] for r in rows),
        sum(r["input_tokens"] for r in rows),
        sum(r["output_tokens"] for r in rows),
        sum(r["cost_micros"] for r in rows),
        sum(r["errors"] for r in rows),
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
    by_hour = await storage.usage.table(org.id, NOON, NOON + 2 * HOUR_US, FIELDS[:3] + ("hour",))
    assert by_hour.names == (*FIELDS[:3], "hour", *SUMS)
    # key, model, provider, hour, then requests, tokens in and out, cost, errors; by time,
    # then key (no key first), model, provider.
    assert by_hour.rows == [
        ("key_1", "small", "sim", NOON, 3, 21, 12, 330, 1),
        ("key_2", "haiku", "claude", NOON, 1, 10, 5, 7, 0),
        (None, "small", None, NOON + HOUR_US, 1, 10, 5, 40, 0),
    ]
    # The ledger's usage rows of the org sum to the same cost.
    listed, _ = await storage.ledger.list(org.id, type=USAGE, limit=100, offset=0)
    assert -sum(t.amount_micros for t in listed) == totals(by_hour)[3] == 377
    whole = await storage.usage.table(org.id, NOON, NOON + 2 * HOUR_US, [])
    assert whole.as_dicts() == [
        {"requests": 5, "input_tokens": 41, "output_tokens": 22, "cost_micros": 377, "errors": 1}
    ]
    day = await storage.usage.table(org.id, 0, NOON * 2, ["day"])
    assert day.rows == [(from_datetime(datetime(2026, 11, 22)), 5, 41, 22, 377, 1)]
    # [start, end): the hour starting at `end` is out, the one at `start` in.
    assert totals(await storage.usage.table(org.id, NOON, NOON + HOUR_US, []))[3] == 337
    assert totals(await storage.usage.table(org.id, NOON + HOUR_US, NOON * 2, []))[3] == 40
    assert totals(await storage.usage.table(other.id, 0, NOON * 2, []))[3] == 999
    # Nothing grouped and nothing there: one row of zeros; grouped: no row.
    assert (await storage.usage.table(org.id, 0, HOUR_US, [])).rows == [(0, 0, 0, 0, 0)]
    assert (await storage.usage.table(org.id, 0, HOUR_US, ["model"])).rows == []


async def test_a_retried_settle_counts_nothing_twice(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    batch = [charge(org.id, 100), charge(org.id, 50)]
    await storage.ledger.settle(batch[:1])
    await storage.ledger.settle(batch, skip_stored=True)  # the first was stored already
    row = await storage.usage.table(org.id, NOON, NOON + HOUR_US, [])
    assert totals(row) == (2, 20, 10, 150, 0)


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
    rows = await storage.usage.table(org.id, hour, hour + HOUR_US, ["key_id", "model"])
    assert rows.rows == [(None, None, 1, 0, 0, 0, 1), ("key_1", "small", 1, 0, 0, 0, 1)]


# Keys whose code-point order differs from a linguistic one ('B' < 'a', 'a-b' < 'ab', 'z' <
# 'é'), and no key ('', answered null) first.
KEYS = ["z", "ab", None, "é", "B", "a-b", "a"]
BY_CODE_POINT = [None, "B", "a", "a-b", "ab", "z", "é"]


async def test_rows_are_ordered_by_time_then_code_point_on_every_path(storage: Storage) -> None:
    """Time first, then key by code point, whichever statement reads the range: the hourly
    table as it is (grouped by its whole key), summed by hour or by day, or days and the hours
    at both ends. On PostgreSQL the columns are given a linguistic collation first, as a
    server's default may be: the order must not follow it."""
    if storage.db.dialect == "postgresql":
        for table in ("usage_hourly", "usage_daily"):
            for column in ("key_id", "model", "provider"):
                await storage.db.execute(
                    f'ALTER TABLE {table} ALTER COLUMN {column} TYPE TEXT COLLATE "und-x-icu"'
                )
    org = await storage.orgs.create("a")
    day = from_datetime(datetime(2026, 11, 22))
    times = (day - HOUR_US, day + 5 * HOUR_US, day + 26 * HOUR_US)  # the day before, in, after
    await storage.ledger.settle(
        [
            charge(org.id, 1 + i, at=at, key=key, model=key or "m", provider=key)
            for at in times
            for i, key in enumerate(KEYS)
        ]
    )
    cost = {key: 1 + i for i, key in enumerate(KEYS)}

    async def grouped(start: int, end: int, *fields: str) -> list[tuple[object, ...]]:
        table = await storage.usage.table(org.id, start, end, fields)
        return [tuple(r[f] for f in (*fields, "cost_micros")) for r in table.as_dicts()]

    # The hourly table as it is.
    whole = await grouped(day - HOUR_US, day + 27 * HOUR_US, "key_id", "model", "provider", "hour")
    assert whole == [(k, k or "m", k, at, cost[k]) for at in times for k in BY_CODE_POINT]
    # Summed by hour; by day over the hours of one day; by day from days and hours.
    by_hour = await grouped(day - HOUR_US, day + 27 * HOUR_US, "key_id", "hour")
    assert by_hour == [(k, at, cost[k]) for at in times for k in BY_CODE_POINT]
    assert await grouped(day, day + 6 * HOUR_US, "key_id", "day") == [
        (k, day, cost[k]) for k in BY_CODE_POINT
    ]
    days = [day - DAY_US, day, day + DAY_US]
    assert await grouped(day - 2 * HOUR_US, day + 27 * HOUR_US, "day", "key_id") == [
        (d, k, cost[k]) for d in days for k in BY_CODE_POINT
    ]
    assert await grouped(day - 2 * HOUR_US, day + 27 * HOUR_US, "provider", "model") == [
        (k, k or "m", 3 * cost[k]) for k in sorted(BY_CODE_POINT, key=lambda k: (k or "m", k or ""))
    ]
    # At most `limit` rows: the first ones.
    first = await storage.usage.table(org.id, day, day + HOUR_US * 6, ["key_id"], limit=2)
    assert first.rows == [(None, 1, 10, 5, cost[None], 0), ("B", 1, 10, 5, cost["B"], 0)]


async def test_grouped_gives_the_table_as_objects(storage: Storage) -> None:
    org = await storage.orgs.create("a")
    await storage.ledger.settle([charge(org.id, 100), charge(org.id, 7, key=None, model="big")])
    [none, key] = await storage.usage.grouped(org.id, NOON, NOON + HOUR_US, ["key_id", "hour"])
    assert none == UsageRow(None, None, None, None, NOON, 1, 10, 5, 7, 0)
    assert key == UsageRow("key_1", None, None, None, NOON, 1, 10, 5, 100, 0)
    [whole] = await storage.usage.grouped(org.id, NOON, NOON + HOUR_US, [])
    assert whole == UsageRow(None, None, None, None, None, 2, 20, 10, 107, 0)
