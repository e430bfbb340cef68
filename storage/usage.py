"""Usage analytics: what an organization's inference requests did, added up per UTC hour, key,
model and provider (`usage_hourly`, migration 0024), and the grouped reads of GET /v1/usage.

The counters are written where the facts are committed, never apart from them, so they always
agree with the ledger: a usage flush (storage/ledger.py `settle`) adds its charges — requests,
tokens, cost, and the errors among them (a stream the client left is charged and is a
`completion.error`) — in its own transaction; the event writer adds the requests that failed
without a charge in the transaction of their `completion.error` events (storage/events.py).
One UPSERT statement per table and write adds every (org, hour, key, model, provider) group of
the batch, however many requests it holds; the daily table holds the same sums per UTC day, so
that a long range reads days, not hours.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from storage.database import Database, Executor

if TYPE_CHECKING:
    from storage.events import NewEvent
    from storage.ledger import UsageCharge

HOUR_US = 3_600 * 1_000_000
DAY_US = 24 * HOUR_US
GROUP_FIELDS = ("key_id", "model", "provider", "day", "hour")
_COUNTERS = ("requests", "input_tokens", "output_tokens", "cost_micros", "errors")
_CHUNKS = (64, 16, 4, 1)  # groups per statement: a few fixed sizes stay compiled (as insert_many)
# Time first, then key, model, provider: the order of the answer's rows, whatever the order of
# `group_by`.
_ORDER = ("day", "hour", "key_id", "model", "provider")


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    time: str  # the column of the period's start


_HOURLY = _Table("usage_hourly", "hour")
_DAILY = _Table("usage_daily", "day")

Group = tuple[str, int, str, str, str]  # org, hour, key ('' none), model, provider ('' unknown)


@dataclass(frozen=True, slots=True)
class FailedRequest:
    """What a `completion.error` event of a request that failed without a charge counts under
    (carried by the event, not in its data: storage/events.py `NewEvent.failed`)."""

    key_id: str | None
    model: str | None
    provider: str | None


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One group of GET /v1/usage: the fields grouped by (None when not grouped by them; a
    key or provider that is not known is None too), and its sums."""

    key_id: str | None
    model: str | None
    provider: str | None
    day: int | None  # the UTC day's start, µs
    hour: int | None  # the UTC hour's start, µs
    requests: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    errors: int


def hour_of(us: int) -> int:
    return us - us % HOUR_US


async def add_charges(tx: Executor, charges: Iterable[UsageCharge]) -> None:
    """Add settled charges (a request each, its tokens and cost; an error when its event is a
    failed request's) inside the ledger's transaction."""
    groups: dict[Group, list[int]] = {}
    for c in charges:
        group = (c.org_id, hour_of(c.created_at), c.key_id or "", c.model, c.provider or "")
        sums = groups.get(group)
        if sums is None:
            sums = groups[group] = [0, 0, 0, 0, 0]
        sums[0] += 1
        sums[1] += c.input_tokens
        sums[2] += c.output_tokens
        sums[3] += c.micros
        if c.event is not None and c.event.failed is not None:
            sums[4] += 1
    await _add(tx, groups)


async def add_failures(tx: Executor, events: Iterable[NewEvent]) -> None:
    """Count the requests that failed without a charge (events carrying `failed`), inside the
    transaction that writes their events."""
    groups: dict[Group, list[int]] = {}
    for e in events:
        failed = e.failed
        if failed is None:
            continue
        group = (
            e.org_id,
            hour_of(e.created_at),
            failed.key_id or "",
            failed.model or "",
            failed.provider or "",
        )
        sums = groups.get(group)
        if sums is None:
            sums = groups[group] = [0, 0, 0, 0, 0]
        sums[0] += 1
        sums[4] += 1
    await _add(tx, groups)


async def take_back(
    tx: Executor,
    org_id: str,
    at: int,
    key_id: str | None,
    model: str,
    provider: str | None,
    micros: int,
) -> None:
    """Take `micros` back from the cost of the group a charge made at `at` was added to (what
    a fine-tuning job's training hold did not use: storage/fine_tuning.py refunds it)."""
    for table, start in ((_HOURLY, hour_of(at)), (_DAILY, at - at % DAY_US)):
        await tx.execute(
            f"UPDATE {table.name} SET cost_micros = cost_micros - :micros"
            f" WHERE org_id = :org_id AND {table.time} = :start AND key_id = :key_id"
            " AND model = :model AND provider = :provider",
            {
                "micros": micros,
                "org_id": org_id,
                "start": start,
                "key_id": key_id or "",
                "model": model,
                "provider": provider or "",
            },
        )


async def _add(tx: Executor, hourly: dict[Group, list[int]]) -> None:
    """Add the hours' groups to the hourly table and, summed per day, to the daily one."""
    if not hourly:
        return
    daily: dict[Group, list[int]] = {}
    for (org, hour, key, model, provider), sums in hourly.items():
        group = (org, hour - hour % DAY_US, key, model, provider)
        into = daily.get(group)
        if into is None:
            daily[group] = list(sums)
        else:
            for i, value in enumerate(sums):
                into[i] += value
    await _upsert(tx, _HOURLY, hourly)
    await _upsert(tx, _DAILY, daily)


async def _upsert(tx: Executor, table: _Table, groups: dict[Group, list[int]]) -> None:
    rows = [(*group, *sums) for group, sums in groups.items()]
    start = 0
    for size in _CHUNKS:
        while len(rows) - start >= size:
            chunk = rows[start : start + size]
            params = {f"v{i}_{j}": v for i, row in enumerate(chunk) for j, v in enumerate(row)}
            await tx.execute(_upsert_sql(table, size), params)
            start += size


@functools.cache
def _upsert_sql(table: _Table, size: int) -> str:
    values = ", ".join(
        "(" + ", ".join(f":v{i}_{j}" for j in range(len(_COUNTERS) + 5)) + ")" for i in range(size)
    )
    columns = ("org_id", table.time, "key_id", "model", "provider", *_COUNTERS)
    adds = ", ".join(f"{c} = {table.name}.{c} + excluded.{c}" for c in _COUNTERS)
    return (
        f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES {values}"
        f" ON CONFLICT (org_id, {table.time}, key_id, model, provider) DO UPDATE SET {adds}"
    )


class UsageRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def grouped(
        self, org_id: str, start_us: int, end_us: int, group_by: Sequence[str]
    ) -> list[UsageRow]:
        """The org's sums over the hours starting in [start, end) (whole hours), a row per
        group of `group_by` (fields of GROUP_FIELDS), ordered by time, then key, model and
        provider (by code point, the same on every backend). No grouping: one row (zeros when
        nothing happened). The whole days of the range are read from the daily table, only
        the hours at its ends (and any `hour` grouping) from the hourly one, in one
        statement."""
        assert set(group_by) <= set(GROUP_FIELDS), group_by
        assert start_us % HOUR_US == 0 and end_us % HOUR_US == 0, (start_us, end_us)
        fields = tuple(f for f in _ORDER if f in group_by)
        first_day = -(-start_us // DAY_US) * DAY_US
        last_day = end_us - end_us % DAY_US
        params = {"org_id": org_id, "start": start_us, "end": end_us}
        if "hour" in fields or first_day >= last_day:
            sql = _hourly_sql(fields)
        else:  # the whole days, and the hours before the first and after the last
            sql = _days_and_hours_sql(fields)
            params.update(first_day=first_day, last_day=last_day)
        rows = await self._db.fetch(sql, params)
        if not rows and not fields:
            return [UsageRow(None, None, None, None, None, 0, 0, 0, 0, 0)]
        # Each row as a tuple: the group's values, then the sums (groups are unique, so the
        # sort orders by the group alone); itemgetter keeps it to a few µs a row.
        found = sorted(map(operator.itemgetter(*fields, *_COUNTERS), rows))
        at = {f: i for i, f in enumerate(fields)}
        k, m, p, d, h = (at.get(f) for f in ("key_id", "model", "provider", "day", "hour"))
        n = len(fields)
        return [
            UsageRow(
                None if k is None else row[k] or None,  # '' stands for none
                None if m is None else row[m] or None,
                None if p is None else row[p] or None,
                None if d is None else int(row[d]),
                None if h is None else int(row[h]),
                int(row[n] or 0),
                int(row[n + 1] or 0),
                int(row[n + 2] or 0),
                int(row[n + 3] or 0),
                int(row[n + 4] or 0),
            )
            for row in found
        ]


# BIGINT: PostgreSQL sums BIGINTs as NUMERIC, which the driver decodes (slowly) as Decimal.
_SUMS = ", ".join(f"CAST(SUM({c}) AS BIGINT) AS {c}" for c in _COUNTERS)


@functools.cache
def _hourly_sql(fields: tuple[str, ...]) -> str:
    exprs = [_HOUR_DAY if f == "day" else f for f in fields]
    picked = "".join(f"{e} AS {f}, " for e, f in zip(exprs, fields, strict=True))
    return (
        f"SELECT {picked}{_SUMS} FROM usage_hourly"
        " WHERE org_id = :org_id AND hour >= :start AND hour < :end"
    ) + (f" GROUP BY {', '.join(exprs)}" if exprs else "")


@functools.cache
def _days_and_hours_sql(fields: tuple[str, ...]) -> str:
    """One statement: the daily rows of [first_day, last_day) and the hourly rows of the
    range outside it, summed per group."""
    daily = "".join(f"{f}, " for f in fields)
    hourly = "".join(f"{_HOUR_DAY if f == 'day' else f} AS {f}, " for f in fields)
    counters = ", ".join(_COUNTERS)
    grouped = f" GROUP BY {', '.join(fields)}" if fields else ""
    return (
        f"SELECT {daily}{_SUMS} FROM ("
        f"SELECT {daily}{counters} FROM usage_daily"
        " WHERE org_id = :org_id AND day >= :first_day AND day < :last_day"
        f" UNION ALL SELECT {hourly}{counters} FROM usage_hourly"
        " WHERE org_id = :org_id AND hour >= :start AND hour < :first_day"
        f" UNION ALL SELECT {hourly}{counters} FROM usage_hourly"  # not an OR: two range reads
        f" WHERE org_id = :org_id AND hour >= :last_day AND hour < :end) AS parts{grouped}"
    )


_HOUR_DAY = f"(hour / {DAY_US}) * {DAY_US}"
