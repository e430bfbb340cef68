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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from storage.database import Database, Executor

if TYPE_CHECKING:
    from storage.events import NewEvent
    from storage.ledger import UsageCharge

HOUR_US = 3_600 * 1_000_000
DAY_US = 24 * HOUR_US
GROUP_FIELDS = ("key_id", "model", "provider", "day", "hour")
_COUNTERS = ("requests", "input_tokens", "output_tokens", "cost_micros", "errors")
_CHUNKS = (64, 16, 4, 1)  # groups per statement: a few fixed sizes stay compiled (as insert_many)


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
    """One group as an object (`UsageRepository.grouped`): the fields grouped by (None when
    not grouped by them; a key, model or provider that is not known is None too), and its
    sums."""

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
        """`table`'s rows as objects, for callers of a few groups (a chart, a tool); GET
        /v1/usage reads `table` itself: an object per row was most of its time."""
        found = await self.table(org_id, start_us, end_us, group_by)
        empty = dict.fromkeys(GROUP_FIELDS)
        return [UsageRow(**{**empty, **row}) for row in found.as_dicts()]

    async def table(
        self,
        org_id: str,
        start_us: int,
        end_us: int,
        group_by: Sequence[str],
        *,
        limit: int = 1_000_000,
    ) -> UsageTable:
        """The org's sums over the hours starting in [start, end) (whole hours), a row per
        group of `group_by` (fields of GROUP_FIELDS), ordered by time, then key, model and
        provider (by code point, the same on every backend). No grouping: one row (zeros when
        nothing happened). The whole days of the range are read from the daily table, only
        the hours at its ends (and any `hour` grouping) from the hourly one, in one
        statement. The database sums, sorts and turns '' into NULL: the rows come back as
        they are answered, with no work per row here (a year by day and everything else is
        7,300 rows, a month by hour 14,880). At most `limit` rows (the first ones): GET
        /v1/usage asks for one over its cap, to refuse an answer over it."""
        assert set(group_by) <= set(GROUP_FIELDS), group_by
        assert start_us % HOUR_US == 0 and end_us % HOUR_US == 0, (start_us, end_us)
        fields = tuple(f for f in GROUP_FIELDS if f in group_by)
        first_day = -(-start_us // DAY_US) * DAY_US
        last_day = end_us - end_us % DAY_US
        params = {"org_id": org_id, "start": start_us, "end": end_us, "limit": limit}
        if "hour" in fields or first_day >= last_day:
            sql = _hourly_sql(self._db.dialect, fields)
        else:  # the whole days, and the hours before the first and after the last
            sql = _days_and_hours_sql(self._db.dialect, fields)
            params.update(first_day=first_day, last_day=last_day)
        return UsageTable(fields, await self._db.fetch_values(sql, params))


@dataclass(frozen=True, slots=True)
class UsageTable:
    """GET /v1/usage's groups as the database answered them: a tuple per group, the values of
    `fields` (GROUP_FIELDS grouped by, in that order: None for no key, provider or model;
    `day` and `hour` the period's start in µs) then the SUMS, sorted by time, key, model,
    provider. Tuples, not an object per row: the finest groupings answer thousands."""

    fields: tuple[str, ...]
    rows: list[Sequence[Any]]

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.fields, *SUMS)

    def as_dicts(self) -> list[dict[str, Any]]:
        """Each row by name (tests, tools; the route reads the tuples)."""
        return [dict(zip(self.names, row, strict=True)) for row in self.rows]


# The sums of a row, in order. BIGINT: PostgreSQL sums BIGINTs as NUMERIC, which the driver
# decodes (slowly) as Decimal; COALESCE: no grouping over nothing sums NULLs (one row of zeros).
SUMS = _COUNTERS
_SUMS = ", ".join(f"CAST(COALESCE(SUM({c}), 0) AS BIGINT)" for c in _COUNTERS)
_TEXT = ("key_id", "model", "provider")  # '' stands for none in the tables, NULL in answers
_HOUR_DAY = f"(hour / {DAY_US}) * {DAY_US}"


def _select(fields: tuple[str, ...], sums: str) -> str:
    """The select list over `u`: the fields ('' as NULL), then the sums."""
    picked = [f"NULLIF(u.{f}, '')" if f in _TEXT else f"u.{f}" for f in fields]
    return ", ".join([*picked, sums])


def _grouped_and_ordered(dialect: str, fields: tuple[str, ...], grouped: bool) -> str:
    """GROUP BY the fields and ORDER BY time, then key, model, provider, by code point: the
    raw columns ('' sorts first, as null is answered first); PostgreSQL's text order depends
    on the database's collation, so its order is COLLATE "C" (bytes of UTF-8: code points),
    SQLite's default BINARY already is. The GROUP BY lists them in that order too: SQLite then
    sorts once for both (and, by hour, not at all: the primary key's order is theirs)."""
    if not fields:
        return ""
    collate = ' COLLATE "C"' if dialect == "postgresql" else ""
    columns = [f for f in ("day", "hour", *_TEXT) if f in fields]
    order = ", ".join(f"u.{f}{collate if f in _TEXT else ''}" for f in columns)
    group = f" GROUP BY {', '.join(f'u.{f}' for f in columns)}" if grouped else ""
    return f"{group} ORDER BY {order}"


@functools.cache
def _hourly_sql(dialect: str, fields: tuple[str, ...]) -> str:
    """The hours of [start, end). Grouped by key, model, provider and hour, a group is a row
    of the table (its key): read as it is, in the key's order, with nothing to sum."""
    hours = "usage_hourly WHERE org_id = :org_id AND hour >= :start AND hour < :end"
    if "day" in fields:  # a range within one day, by day
        columns = ", ".join((*_TEXT, *_COUNTERS))
        source = f"(SELECT {columns}, {_HOUR_DAY} AS day FROM {hours}) AS u"
    else:
        source = hours.replace("usage_hourly", "usage_hourly AS u", 1)
    whole = set(fields) == {*_TEXT, "hour"}
    sums = ", ".join(f"u.{c}" for c in _COUNTERS) if whole else _SUMS
    ordered = _grouped_and_ordered(dialect, fields, grouped=not whole)
    return f"SELECT {_select(fields, sums)} FROM {source}{ordered} LIMIT :limit"


@functools.cache
def _days_and_hours_sql(dialect: str, fields: tuple[str, ...]) -> str:
    """One statement: the daily rows of [first_day, last_day) and the hourly rows of the
    range outside it, summed per group."""
    text = "".join(f"{f}, " for f in _TEXT)
    counters = ", ".join(_COUNTERS)
    hours = f" UNION ALL SELECT {text}{_HOUR_DAY} AS day, {counters} FROM usage_hourly"
    parts = (
        f"SELECT {text}day, {counters} FROM usage_daily"
        " WHERE org_id = :org_id AND day >= :first_day AND day < :last_day"
        f"{hours} WHERE org_id = :org_id AND hour >= :start AND hour < :first_day"
        # the two ends as two range reads, not an OR (SQLite would walk all of the org's hours)
        f"{hours} WHERE org_id = :org_id AND hour >= :last_day AND hour < :end"
    )
    ordered = _grouped_and_ordered(dialect, fields, grouped=True)
    return f"SELECT {_select(fields, _SUMS)} FROM ({parts}) AS u{ordered} LIMIT :limit"
