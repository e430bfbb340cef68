"""How long GET /v1/usage's queries take on a year of hourly usage (storage/usage.py).

    python -m bench.usage_query_cost [--postgres URL] [--keys 5] [--models 4] [--runs 5]

Fills `usage_hourly` and `usage_daily` with one organization's year (8,760 hours × keys ×
models rows, each model with its provider; another organization beside it, as much again, so
the org's range is read through the index) and times `UsageRepository.table` for each
grouping: over a year that is not day-aligned (whole days from the daily table, the hours at
each end from the hourly one) or, grouped by hour, over the last 31 days (the most the API
takes). On SQLite (a temporary file) and, with `--postgres`, on PostgreSQL (a schema of its
own, dropped afterwards). Prints, per grouping, the rows it answers and the median and worst
of `--runs` runs in ms of the whole answer (the query, the rows rendered and the JSON encoded,
as the route does: gateway/usage/report.py), and the median of the query alone; the target
is < 200 ms (issue #25).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

import msgspec
import trio

from gateway.usage.report import usage_answer
from protocol.ids import random_token
from storage.database import Database
from storage.migrate import migrate
from storage.open import open_database
from storage.usage import DAY_US, HOUR_US, UsageRepository

HOURS = 24 * 365
START = 1_764_547_200_000_000  # 2025-12-01T00:00:00Z
GROUPINGS = (
    (),
    ("day",),
    ("hour",),
    ("key_id",),
    ("model",),
    ("provider",),
    ("key_id", "model"),
    ("model", "day"),
    ("key_id", "model", "provider", "day"),
    ("key_id", "model", "provider", "hour"),
)
_COLUMNS = (
    "org_id",
    "hour",
    "key_id",
    "model",
    "provider",
    "requests",
    "input_tokens",
    "output_tokens",
    "cost_micros",
    "errors",
)


async def _fill(db: Database, org: str, keys: int, models: int) -> int:
    hourly: dict[tuple[str, int, str, str, str], list[int]] = {}
    daily: dict[tuple[str, int, str, str, str], list[int]] = {}
    for h in range(HOURS):
        hour = START + h * HOUR_US
        for k in range(keys):
            for m in range(models):
                n = 1 + (h + k + m) % 17
                sums = [n, 400 * n, 90 * n, 1_234 * n, int((h + m) % 3 == 0)]
                group = (f"key_{k}", f"model-{m}", f"provider-{m % 2}")
                hourly[(org, hour, *group)] = sums
                into = daily.setdefault((org, hour - hour % DAY_US, *group), [0] * 5)
                for i, value in enumerate(sums):
                    into[i] += value
    rows = [(*group, *sums) for group, sums in hourly.items()]
    for table, filled in (
        ("usage_hourly", rows),
        ("usage_daily", [(*group, *sums) for group, sums in daily.items()]),
    ):
        columns = _COLUMNS if table == "usage_hourly" else ("org_id", "day", *_COLUMNS[2:])
        for start in range(0, len(filled), 10_000):
            async with db.transaction() as tx:
                await tx.insert_many(table, columns, filled[start : start + 10_000])
    return len(rows)


async def _time(db: Database, runs: int) -> list[tuple[str, float, float, float, int]]:
    repo = UsageRepository(db)
    results = []
    # A year ending at 13:00 (whole days and two ends of hours); `hour`: the last 31 days.
    end = START + HOURS * HOUR_US - 11 * HOUR_US
    for grouping in GROUPINGS:
        took, queried = [], []
        answered = 0
        start = end - 31 * DAY_US if "hour" in grouping else START + 13 * HOUR_US
        for _ in range(runs):
            began = time.perf_counter()
            table = await repo.table("org_a", start, end, grouping)
            queried.append((time.perf_counter() - began) * 1000)
            msgspec.json.encode(usage_answer(table, start, end))
            took.append((time.perf_counter() - began) * 1000)
            answered = len(table.rows)
        name = ",".join(grouping) or "(none)"
        results.append(
            (name, statistics.median(took), max(took), statistics.median(queried), answered)
        )
    return results


@asynccontextmanager
async def _postgres(url: str) -> AsyncIterator[str]:
    schema = f"bench_{random_token(12).lower()}"
    async with open_database(url) as admin:
        await admin.execute(f"CREATE SCHEMA {schema}")
        try:
            sep = "&" if "?" in url else "?"
            yield f"{url}{sep}{urlencode({'search_path': schema})}"
        finally:
            await admin.execute(f"DROP SCHEMA {schema} CASCADE")


async def _bench(url: str, name: str, args: argparse.Namespace) -> None:
    async with open_database(url) as db:
        await migrate(db)
        began = time.perf_counter()
        n = await _fill(db, "org_a", args.keys, args.models)
        await _fill(db, "org_b", args.keys, args.models)
        if db.dialect == "postgresql":
            await db.execute("ANALYZE usage_hourly")
        else:
            await db.execute("ANALYZE")
        print(f"{name}: {n} rows for the org ({n * 2} in all), filled in"
              f" {time.perf_counter() - began:.1f} s")  # fmt: skip
        print(f"  {'group_by':<36} {'rows':>6} {'median ms':>10} {'max ms':>8} {'query ms':>9}")
        for grouping, median, worst, query, rows in await _time(db, args.runs):
            print(f"  {grouping:<36} {rows:>6} {median:>10.1f} {worst:>8.1f} {query:>9.1f}")


async def _main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await _bench(f"sqlite:///{Path(tmp) / 'usage.db'}", "sqlite", args)
    if args.postgres:
        async with _postgres(args.postgres) as url:
            await _bench(url, "postgresql", args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", help="a PostgreSQL URL (a schema is made and dropped)")
    parser.add_argument("--keys", type=int, default=5)
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5)
    trio.run(_main, parser.parse_args())


if __name__ == "__main__":
    main()
