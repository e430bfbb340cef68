"""GET /v1/usage's rendering of the database's rows (gateway/usage/report.py): only the fields
grouped by, periods as UTC text, cost in USD equal to what micros_to_usd renders."""

from __future__ import annotations

import random
from datetime import datetime

import msgspec

from gateway.usage.report import usage_answer
from protocol.money import micros_to_usd
from protocol.timefmt import from_datetime
from protocol.usage_api import UsageReport
from storage.usage import HOUR_US, UsageTable

NOON = from_datetime(datetime(2026, 11, 27, 12))


def test_rows_become_objects_of_the_fields_grouped_by() -> None:
    table = UsageTable(
        ("key_id", "model", "hour"),
        [
            (None, "small", NOON, 3, 21, 12, 330, 1),
            ("key_2", None, NOON, 1, 10, 5, 7, 0),
            ("key_2", None, NOON + HOUR_US, 1, 0, 0, 1_234_567_891, 0),
        ],
    )
    answer = usage_answer(table, NOON, NOON + 2 * HOUR_US)
    assert answer == {
        "data": [
            {"key_id": None, "model": "small", "hour": "2026-11-27T12:00:00Z", "requests": 3,
             "input_tokens": 21, "output_tokens": 12, "cost_usd": 0.00033, "errors": 1},
            {"key_id": "key_2", "model": None, "hour": "2026-11-27T12:00:00Z", "requests": 1,
             "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.000007, "errors": 0},
            {"key_id": "key_2", "model": None, "hour": "2026-11-27T13:00:00Z", "requests": 1,
             "input_tokens": 0, "output_tokens": 0, "cost_usd": 1234.567891, "errors": 0},
        ],
        "total_cost_usd": micros_to_usd(330 + 7 + 1_234_567_891),
        "start_date": "2026-11-27T12:00:00Z",
        "end_date": "2026-11-27T14:00:00Z",
    }  # fmt: skip
    # The wire type of the OpenAPI document reads it back, strictly.
    report = msgspec.json.decode(msgspec.json.encode(answer), type=UsageReport)
    assert [g.hour for g in report.data] == ["2026-11-27T12:00:00Z", "2026-11-27T12:00:00Z",
                                             "2026-11-27T13:00:00Z"]  # fmt: skip


def test_days_and_no_grouping() -> None:
    by_day = usage_answer(
        UsageTable(("day",), [(NOON - NOON % (24 * HOUR_US), 1, 2, 3, 4, 0)]), 0, 0
    )
    assert by_day["data"] == [
        {"day": "2026-11-27", "requests": 1, "input_tokens": 2, "output_tokens": 3,
         "cost_usd": 0.000004, "errors": 0}
    ]  # fmt: skip
    whole = usage_answer(UsageTable((), [(0, 0, 0, 0, 0)]), 0, HOUR_US)
    assert whole["data"] == [
        {"requests": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "errors": 0}
    ]
    assert usage_answer(UsageTable(("model",), []), 0, 0)["data"] == []


def test_cost_is_the_float_micros_to_usd_renders() -> None:
    """The answer divides micro-dollars as integers (correctly rounded), not through Decimal:
    the same float for amounts of every size, negative ones too (a refunded hold)."""
    rng = random.Random(25)
    amounts = [0, 1, -1, 5, 999_999, 1_000_001, 2**53 - 1, 2**53 + 1, 10**15 + 7, -(10**12) - 3]
    amounts += [rng.randrange(-(10**16), 10**16) for _ in range(20_000)]
    amounts += [rng.randrange(0, 10**7) for _ in range(20_000)]
    table = UsageTable(("model",), [(f"m{i}", 1, 0, 0, m, 0) for i, m in enumerate(amounts)])
    rendered = [g["cost_usd"] for g in usage_answer(table, 0, 0)["data"]]
    assert rendered == [micros_to_usd(m) for m in amounts]
