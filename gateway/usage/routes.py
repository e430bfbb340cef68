"""GET /v1/usage (`billing:read`; management keys hold every scope): the organization's usage
over a range of whole UTC hours, grouped by any of `key_id`, `model`, `provider` and one of
`day` or `hour` (docs/usage.md).

The range: `start_date` and `end_date` are ISO 8601 dates (midnight UTC) or date-times (naive
= UTC), as GET /v1/credits/transactions reads them; the start rounds down and the end up to
the hour (the counters are hourly), and the answer says the range it summed. Without them, the
last 30 days up to the end of the current hour; at most 366 days, and 31 grouped by hour. An
answer holds at most MAX_ROWS groups (400 past it).
"""

from __future__ import annotations

from gateway.usage.report import usage_answer
from gateway.web import Operation, Request, Response, Routes, json_response
from protocol import errors
from protocol.scopes import BILLING_READ
from protocol.timefmt import now_us
from protocol.usage_api import UsageReport
from storage.usage import DAY_US, GROUP_FIELDS, HOUR_US, UsageRepository

DEFAULT_DAYS = 30
MAX_DAYS = 366
MAX_HOURLY_DAYS = 31  # 744 hours: an hourly breakdown of a longer range is asked by day
# Groups in one answer. An answer costs ~4 µs a row, most of it on the event loop (decoding,
# rendering, encoding: docs/usage.md, "Cost"); 50,000 rows are ~0.2–0.5 s and ~9 MB of JSON.
# The finest grouping of 5 keys × 4 models answers 14,880 rows (a month by hour).
MAX_ROWS = 50_000


def routes(usage: UsageRepository) -> Routes:
    r = Routes()

    @r.operation(
        Operation(
            "GET",
            "/v1/usage",
            "Requests, input and output tokens, cost and errors of the organization's"
            " inference, summed per group over a range of whole UTC hours",
            "Billing",
            response=UsageReport,
            scope=BILLING_READ,
            errors=(400, 401, 403),
            query=(
                (
                    "start_date",
                    "string",
                    "ISO 8601 date or date-time, rounded down to the hour; default: 30 days"
                    " before end_date",
                ),
                (
                    "end_date",
                    "string",
                    "ISO 8601, exclusive, rounded up to the hour; default: the end of the"
                    f" current hour; at most {MAX_DAYS} days after start_date",
                ),
                (
                    "group_by",
                    "string",
                    "comma list of key_id, model, provider, day, hour (day or hour, not both;"
                    f" hour over at most {MAX_HOURLY_DAYS} days); none: one total row; at most"
                    f" {MAX_ROWS:,} groups",
                ),
            ),
        )
    )
    async def get_usage(request: Request) -> Response:
        principal = request.principal
        assert principal is not None
        start, end = usage_range(
            request.query_time("start_date"), request.query_time("end_date"), now_us()
        )
        group_by = parse_group_by(request.query.get("group_by"))
        if "hour" in group_by and end - start > MAX_HOURLY_DAYS * DAY_US:
            raise errors.invalid_request(
                f"`group_by` hour covers at most {MAX_HOURLY_DAYS} days: group a longer range"
                " by day.",
                param="group_by",
            )
        table = await usage.table(principal.org_id, start, end, group_by, limit=MAX_ROWS + 1)
        if len(table.rows) > MAX_ROWS:
            raise errors.invalid_request(
                f"The answer would have over {MAX_ROWS:,} groups: narrow the range"
                " (`start_date`, `end_date`) or group by fewer fields.",
                param="group_by",
            )
        return json_response(usage_answer(table, start, end))  # the shape of UsageReport

    return r


def usage_range(start: int | None, end: int | None, now: int) -> tuple[int, int]:
    """[start, end) in whole hours: the start rounded down, the end up; 400 naming the
    parameter for an end before the start or a range over MAX_DAYS."""
    if start is not None:
        start -= start % HOUR_US
    if end is not None:
        end = _ceil_hour(end)
    if start is not None and end is not None and end < start:
        raise errors.invalid_request("`end_date` is before `start_date`.", param="end_date")
    if end is None:
        end = max(_ceil_hour(now + 1), start or 0)
    if start is None:
        start = end - DEFAULT_DAYS * DAY_US
    if end - start > MAX_DAYS * DAY_US:
        raise errors.invalid_request(
            f"The range is over {MAX_DAYS} days: ask for it in parts.", param="end_date"
        )
    return start, end


def _ceil_hour(us: int) -> int:
    return -(-us // HOUR_US) * HOUR_US


def parse_group_by(raw: str | None) -> list[str]:
    """The fields to group by, in the order given; 400 (`param` group_by) for an unknown or
    repeated one, an empty item, or `day` with `hour`."""
    if raw is None:
        return []
    names = [name.strip() for name in raw.split(",")]
    for name in names:
        if name not in GROUP_FIELDS:
            raise errors.invalid_request(
                f"`group_by` takes a comma list of {', '.join(GROUP_FIELDS)}; got {name!r}.",
                param="group_by",
            )
    if len(set(names)) != len(names):
        raise errors.invalid_request("`group_by` names a field twice.", param="group_by")
    if "day" in names and "hour" in names:
        raise errors.invalid_request(
            "`group_by` takes `day` or `hour`, not both.", param="group_by"
        )
    return names
