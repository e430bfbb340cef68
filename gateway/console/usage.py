"""The usage page (sums by day, key and model over a range, with charts) and its CSV export."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from gateway.console import data
from gateway.console.charts import bar_chart
from gateway.console.http import Page, PageError, send_page
from gateway.console.routing import PREFIX, html, need_org, route
from gateway.server.asgi import Send
from gateway.usage.routes import usage_range
from protocol.errors import APIError
from protocol.money import micros_to_usd
from protocol.timefmt import from_datetime, now_us, to_iso

if TYPE_CHECKING:
    from gateway.console.app import Console


def _range(page: Page) -> tuple[int, int, str, str]:
    """[start, end) from `start` and `end` (dates, both included); default the last 7 days."""
    today = datetime.now(UTC).date()
    try:
        first = date.fromisoformat(page.query.get("start") or str(today - timedelta(days=6)))
        last = date.fromisoformat(page.query.get("end") or str(today))
    except ValueError:
        raise PageError(400, "Dates are written YYYY-MM-DD.") from None
    start = from_datetime(datetime(first.year, first.month, first.day, tzinfo=UTC))
    end = from_datetime(datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(1))
    try:
        start, end = usage_range(start, end, now_us())
    except APIError as exc:
        raise PageError(400, exc.message) from None
    return start, end, first.isoformat(), last.isoformat()


@route("GET", PREFIX + "/usage")
async def usage(console: Console, page: Page, send: Send) -> None:
    org = await console.org_of(page)
    values = await console.common(page, "usage", org)
    start, end, first, last = _range(page)
    values.update(start=first, end=last, chart=None, cost_chart=None)
    if org is not None:
        storage = console.runtime.storage
        names = await data.key_names(storage, org.id)
        by_day = await storage.usage.grouped(org.id, start, end, ["day"])
        days = {(to_iso(r.day) or "")[:10]: r for r in by_day}
        points = []
        cursor = datetime.fromisoformat(first).date()
        while cursor.isoformat() <= last:
            points.append((cursor.isoformat(), days.get(cursor.isoformat())))
            cursor += timedelta(days=1)
        values["chart"] = bar_chart(
            "Requests per day", [(d, float(r.requests) if r else 0.0) for d, r in points], "{:.0f}"
        )
        values["cost_chart"] = bar_chart(
            "Spend per day (USD)",
            [(d, micros_to_usd(r.cost_micros) if r else 0.0) for d, r in points],
            "{:.4f}",
        )
        values["days"] = [(d, data.Totals.of([r] if r else [])) for d, r in points]
        by_key = await storage.usage.grouped(org.id, start, end, ["key_id"])
        by_model = await storage.usage.grouped(org.id, start, end, ["model"])
        values["by_key"] = [
            (names.get(r.key_id or "", r.key_id or "(none)"), data.Totals.of([r])) for r in by_key
        ]
        values["by_model"] = [(r.model or "(unknown)", data.Totals.of([r])) for r in by_model]
        values["total"] = data.Totals.of(by_day)
        query = {"start": first, "end": last}
        assert page.session is not None
        if page.session.operator:
            query["org"] = org.id
        values["csv_url"] = f"{PREFIX}/usage.csv?{urlencode(query)}"
    await html(send, console.render("usage.html", **values))


_CSV_RISKY = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    """A CSV cell a spreadsheet will not run as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_CSV_RISKY) else text


@route("GET", PREFIX + "/usage.csv")
async def usage_csv(console: Console, page: Page, send: Send) -> None:
    org = await need_org(console, page)
    start, end, first, last = _range(page)
    storage = console.runtime.storage
    names = await data.key_names(storage, org.id)
    rows = await storage.usage.grouped(org.id, start, end, ["day", "key_id", "model"])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(
        ["day", "key_id", "key_name", "model", "requests", "input_tokens", "output_tokens"]
        + ["cost_usd", "errors"]
    )
    for r in rows:
        writer.writerow(
            [
                _cell((to_iso(r.day) or "")[:10]),
                _cell(r.key_id),
                _cell(names.get(r.key_id or "", "")),
                _cell(r.model),
                r.requests,
                r.input_tokens,
                r.output_tokens,
                f"{micros_to_usd(r.cost_micros):.6f}",
                r.errors,
            ]
        )
    filename = f"usage-{first}-{last}.csv"
    await send_page(
        send,
        200,
        out.getvalue().encode(),
        [(b"content-disposition", f'attachment; filename="{filename}"'.encode())],
        content_type=b"text/csv; charset=utf-8",
    )
