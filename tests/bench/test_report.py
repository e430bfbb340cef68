"""Reports: the terminal table, CSV round trip, PNG plots and the progress line."""

from __future__ import annotations

import io
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

from bench.load import LoadResult, Scenario
from bench.report import (
    SLOW_STREAMS,
    Progress,
    Row,
    billing_overhead,
    read_csv,
    terminal_table,
    workers_scaling,
    write_csv,
    write_plots,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def result(stream: bool, concurrency: int, latencies_ms: list[float], **kw: object) -> LoadResult:
    sc = Scenario("s", "http://127.0.0.1:1/v1", "k", "m", stream, concurrency, requests=1)
    lat = [v / 1000 for v in latencies_ms]
    res = LoadResult(sc, latencies_s=lat, ttfb_s=[v / 2 for v in lat], completed=len(lat))
    res.elapsed_s = 0.5
    res.errors.update(kw.get("errors", {}))  # type: ignore[arg-type]
    return res


def sample_rows() -> list[Row]:
    rows = []
    for stream in (False, True):
        for c in (1, 8, 64):
            direct = result(stream, c, [1.0, 2.0, 3.0])
            gateway = result(stream, c, [1.5, 2.75, 4.0], errors={"status_502": 2, "timeout": 1})
            rows.append(Row.from_result(direct, scenario="direct"))
            rows.append(
                Row.from_result(
                    gateway,
                    scenario="gateway",
                    direct=direct,
                    gateway_peak_rss_mb=61.25,
                    gateway_cpu_us_per_req=412.4,
                )
            )
    slow = result(True, 1000, [20000.0] * 4)
    rows.append(Row.from_result(slow, scenario=SLOW_STREAMS, gateway_peak_rss_mb=98.5))
    return rows


def test_row_from_result_computes_added_latency() -> None:
    direct = result(False, 8, [1.0, 2.0, 3.0])
    gateway = result(False, 8, [1.5, 2.75, 4.0], errors={"timeout": 1, "status_502": 2})
    row = Row.from_result(gateway, scenario="gateway", direct=direct, gateway_peak_rss_mb=50.0)
    assert (row.scenario, row.mode, row.concurrency) == ("gateway", "json", 8)
    assert row.rps == 6.0
    assert row.p50_ms == 2.75
    assert row.added_p50_ms == 0.75
    assert row.added_ttfb_p50_ms == 0.375
    assert row.errors == 3
    assert row.error_kinds == "status_502:2 timeout:1"
    assert Row.from_result(direct).added_p50_ms is None


def test_terminal_table_has_columns_and_values() -> None:
    text = terminal_table(sample_rows())
    lines = text.splitlines()
    header = lines[0]
    for column in (
        "scenario",
        "mode",
        "concurrency",
        "req/s",
        "p50 ms",
        "p99 ms",
        "ttfb p50 ms",
        "added p50 ms",
        "errors",
        "gateway peak RSS MB",
        "gateway CPU us/req",
    ):
        assert column in header
    assert set(lines[1]) <= {"-", " "}
    assert len(lines) == 2 + 13
    gateway_sse_64 = lines[2 + 11]
    assert gateway_sse_64.split()[:4] == ["gateway", "sse", "64", "6"]
    assert "2.75" in gateway_sse_64
    assert "+0.75" in gateway_sse_64
    assert "3 (status_502:2 timeout:1)" in gateway_sse_64
    assert gateway_sse_64.endswith("61.2                 412")
    assert lines[-1].startswith(SLOW_STREAMS) and lines[-1].endswith("98.5                   -")
    # Aligned: every right-aligned column ends at the same offset as its header.
    end = header.index("req/s") + len("req/s")
    assert all(line[end - 1] != " " for line in lines[2:])


def test_csv_round_trips(tmp_path: Path) -> None:
    rows = sample_rows()
    path = tmp_path / "bench.csv"
    write_csv(path, rows)
    assert path.read_text().splitlines()[0].startswith("scenario,mode,concurrency,")
    again = read_csv(path)
    assert again == rows
    assert again[0].added_p50_ms is None


def test_csv_keeps_nan_for_empty_runs(tmp_path: Path) -> None:
    empty = Row.from_result(result(False, 1, []))
    write_csv(tmp_path / "e.csv", [empty])
    (back,) = read_csv(tmp_path / "e.csv")
    assert math.isnan(back.p50_ms) and back.completed == 0
    assert "-" in terminal_table([back])


def test_plots_are_png_files(tmp_path: Path) -> None:
    paths = write_plots(tmp_path / "plots", sample_rows())
    assert [p.name for p in paths] == ["latency.png", "throughput.png"]
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        assert len(data) > 5000


def test_plots_with_one_mode_and_one_point(tmp_path: Path) -> None:
    row = Row.from_result(result(False, 64, [1.0]), scenario="target")
    paths = write_plots(tmp_path, [row])
    assert all(p.read_bytes().startswith(PNG_SIGNATURE) for p in paths)


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_on_a_tty_only() -> None:
    quiet = io.StringIO()
    p = Progress("json c=8", total=10, stream=quiet)
    p.update(5)
    p.close()
    assert quiet.getvalue() == ""

    tty = FakeTTY()
    p = Progress("json c=8", total=10, stream=tty, width=10)
    p.update(5)
    p.update(6)  # within 0.1 s of the last draw: not redrawn
    p.close()
    out = tty.getvalue()
    assert out.startswith("\rjson c=8 [#####.....] 5/10 req")
    assert out.count("\r") == 2
    assert "6/10" in out and out.endswith("\n")


def test_progress_by_time() -> None:
    tty = FakeTTY()
    p = Progress("sse", duration_s=1e9, stream=tty, width=4)
    p.update(3)
    assert "[....] 3 req" in tty.getvalue()


def test_error_kinds_keep_counter_order() -> None:
    res = result(False, 1, [1.0], errors=Counter({"connect": 1, "stream_cut": 5}))
    assert Row.from_result(res).error_kinds == "stream_cut:5 connect:1"


def test_workers_scaling_compares_each_mode_with_one_worker() -> None:
    def row(name: str, stream: bool, latencies: list[float]) -> Row:
        return Row.from_result(result(stream, 64, latencies), scenario=name)

    rows = [
        row("workers-1", False, [1.0] * 4),  # 8 req/s
        row("workers-1", True, [1.0] * 2),  # 4 req/s
        row("workers-2", False, [1.0] * 6),  # 12 req/s
        row("workers-2", True, [1.0] * 7),  # 14 req/s
        row("gateway", False, [1.0] * 100),
    ]
    assert workers_scaling(rows) == (
        "json at concurrency 64: 2 workers 12 req/s = 1.50x one worker (8 req/s)\n"
        "sse at concurrency 64: 2 workers 14 req/s = 3.50x one worker (4 req/s)\n"
    )
    assert workers_scaling(rows[2:]) == ""  # nothing to compare with


def test_billing_overhead_compares_on_with_off_per_mode() -> None:
    def row(name: str, stream: bool, n: int, cpu: float) -> Row:
        r = Row.from_result(result(stream, 64, [1.0] * n), scenario=name)
        return replace(r, gateway_cpu_us_per_req=cpu)

    rows = [
        row("billing-on", False, 9, 250.0),
        row("billing-off", False, 10, 200.0),
        row("billing-on", True, 4, 100.0),  # no "off" for sse: not compared
    ]
    assert billing_overhead(rows) == (
        "json at concurrency 64: billing on uses 1.25x the CPU per request of billing off;"
        " throughput 0.90x\n"
    )
    rows += [row("billing-on", False, 11, 350.0), row("billing-off", False, 10, 200.0)]
    assert billing_overhead(rows) == (  # two rounds: the means of each side
        "json at concurrency 64: billing on uses 1.50x the CPU per request of billing off;"
        " throughput 1.00x\n"
    )
