"""GET /v1/usage's answer from the database's rows (storage/usage.py `UsageTable`): a JSON
object per group with only the fields grouped by, `day`/`hour` as UTC text, cost in USD.

The finest groupings answer thousands of rows (a month by hour, key, model and provider:
14,880 for 5 keys × 4 models), so nothing here runs Python code per row: the rows are turned
into columns, the two columns that change are mapped by built-ins (a period's text looked up
among the few distinct periods, micro-dollars divided), and each row becomes a dict by `zip`,
all in C. The protocol's `UsageReport` describes the same shape for the OpenAPI document.
"""

from __future__ import annotations

import functools
import itertools
import operator
from typing import Any

from protocol.money import MICROS_PER_USD, micros_to_usd
from protocol.timefmt import to_iso
from storage.usage import SUMS, UsageTable

# A row's names on the wire: the sums as stored but cost, which is answered in USD.
_SUM_NAMES = tuple("cost_usd" if s == "cost_micros" else s for s in SUMS)
_COST = SUMS.index("cost_micros")


def usage_answer(table: UsageTable, start_us: int, end_us: int) -> dict[str, Any]:
    """The answer's object: `data`, `total_cost_usd` (the rows' micro-dollars summed, then
    rendered), and the range summed."""
    n = len(table.fields)
    data: list[dict[str, Any]] = []
    total = 0
    if table.rows:
        columns: list[Any] = list(zip(*table.rows, strict=True))
        cost = columns[n + _COST]
        total = sum(cost)
        # int / int is correctly rounded: the same float as micros_to_usd's exact Decimal
        # quotient (tests/gateway/test_usage_report.py), at a tenth of its cost.
        columns[n + _COST] = map(operator.truediv, cost, itertools.repeat(MICROS_PER_USD))
        for i, field in enumerate(table.fields):
            if field in ("day", "hour"):
                render = _day if field == "day" else _hour
                text = {at: render(at) for at in set(columns[i])}  # a few hundred at most
                columns[i] = map(text.__getitem__, columns[i])
        names = (*table.fields, *_SUM_NAMES)
        rows = zip(*columns, strict=True)
        data = list(map(dict, map(functools.partial(zip, names, strict=True), rows)))
    return {
        "data": data,
        "total_cost_usd": micros_to_usd(total),
        "start_date": _hour(start_us),
        "end_date": _hour(end_us),
    }


def _hour(us: int) -> str:
    return to_iso(us) or ""  # "2026-11-27T13:00:00Z"


def _day(us: int) -> str:
    return _hour(us)[:10]  # "2026-11-27"
