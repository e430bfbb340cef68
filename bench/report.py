"""Reports of a bench run: the terminal table, a CSV file, PNG plots and a progress line.

Everything here is a pure function of `Row`s (plus the clock, for `Progress`): it measures nothing
and starts nothing. Plots need matplotlib (the `bench` extra); it is imported only when plotting.
"""

from __future__ import annotations

import csv
import math
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TextIO

from bench.load import LoadResult, Measured

SLOW_STREAMS = "slow-streams"  # its one point at N=1000 would flatten the concurrency plots


@dataclass(frozen=True)
class Row:
    """One scenario's measurements, as reported."""

    scenario: str  # "direct", "gateway", "slow-streams", or a name given by `bench run`
    mode: str  # "json" or "sse"
    concurrency: int
    completed: int
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    ttfb_p50_ms: float
    ttfb_p99_ms: float
    added_p50_ms: float | None  # vs the direct run at the same mode and concurrency
    added_ttfb_p50_ms: float | None
    errors: int
    error_kinds: str  # "kind:count" separated by spaces, most common first
    gateway_peak_rss_mb: float | None
    gateway_cpu_us_per_req: float | None = None  # the gateway's CPU time / requests measured

    @classmethod
    def from_result(
        cls,
        result: LoadResult,
        *,
        scenario: str | None = None,
        direct: LoadResult | None = None,
        gateway_peak_rss_mb: float | None = None,
        gateway_cpu_us_per_req: float | None = None,
    ) -> Row:
        sc = result.scenario
        added = added_ttfb = None
        if direct is not None and direct.completed:
            added = result.p50_ms - direct.p50_ms
            added_ttfb = result.ttfb_p50_ms - direct.ttfb_p50_ms
        return cls(
            scenario=scenario or sc.name,
            mode="sse" if sc.stream else "json",
            concurrency=sc.concurrency,
            completed=result.completed,
            rps=result.rps,
            p50_ms=result.p50_ms,
            p90_ms=result.p90_ms,
            p99_ms=result.p99_ms,
            ttfb_p50_ms=result.ttfb_p50_ms,
            ttfb_p99_ms=result.ttfb_p99_ms,
            added_p50_ms=added,
            added_ttfb_p50_ms=added_ttfb,
            errors=result.error_count,
            error_kinds=" ".join(f"{k}:{n}" for k, n in result.errors.most_common()),
            gateway_peak_rss_mb=gateway_peak_rss_mb,
            gateway_cpu_us_per_req=gateway_cpu_us_per_req,
        )

    @classmethod
    def from_measured(cls, measured: Measured, *, direct: LoadResult | None = None) -> Row:
        return cls.from_result(
            measured.result,
            direct=direct,
            gateway_peak_rss_mb=measured.peak_rss_mb,
            gateway_cpu_us_per_req=measured.cpu_us_per_request,
        )


def _num(value: float | None, digits: int) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:+.2f}"


_COLUMNS = (
    "scenario",
    "mode",
    "concurrency",
    "req/s",
    "p50 ms",
    "p99 ms",
    "ttfb p50 ms",
    "added p50 ms",
    "added ttfb ms",
    "errors",
    "gateway peak RSS MB",
    "gateway CPU us/req",
)


def terminal_table(results: Sequence[Row]) -> str:
    """Aligned columns, one line per row; text left-aligned, numbers right-aligned."""
    lines = [list(_COLUMNS)]
    for r in results:
        errors = str(r.errors) + (f" ({r.error_kinds})" if r.error_kinds else "")
        lines.append(
            [
                r.scenario,
                r.mode,
                str(r.concurrency),
                _num(r.rps, 0),
                _num(r.p50_ms, 2),
                _num(r.p99_ms, 2),
                _num(r.ttfb_p50_ms, 2),
                _signed(r.added_p50_ms),
                _signed(r.added_ttfb_p50_ms),
                errors,
                _num(r.gateway_peak_rss_mb, 1),
                _num(r.gateway_cpu_us_per_req, 0),
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(_COLUMNS))]
    text_columns = {0, 1}
    out = []
    for line in lines:
        cells = [
            cell.ljust(w) if i in text_columns else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out) + "\n"


def workers_scaling(results: Sequence[Row]) -> str:
    """`workers-N` rows against `workers-1` at the same mode: one line per mode, or ''."""
    base = {r.mode: r for r in results if r.scenario == "workers-1"}
    lines = []
    for r in results:
        one = base.get(r.mode)
        if r.scenario.startswith("workers-") and r is not one and one is not None and one.rps:
            n = r.scenario.removeprefix("workers-")
            lines.append(
                f"{r.mode} at concurrency {r.concurrency}: {n} workers "
                f"{r.rps:.0f} req/s = {r.rps / one.rps:.2f}x one worker ({one.rps:.0f} req/s)"
            )
    return "".join(line + "\n" for line in lines)


def side_by_side(
    results: Sequence[Row], subject: str, reference: str, *, labels: tuple[str, str] | None = None
) -> str:
    """`subject` rows against `reference` rows (two gateways loaded at once), one line per mode:
    CPU per request and throughput, each the mean over the rounds (rows) of its scenario. A mode
    is left out unless both sides have rows, every row its CPU, and `reference` some throughput.
    `labels` name the two sides in the text (default: the scenario names)."""
    subject_label, reference_label = labels or (subject, reference)

    def means(scenario: str, mode: str) -> tuple[float, float] | None:
        rows = [r for r in results if r.scenario == scenario and r.mode == mode]
        cpus = [r.gateway_cpu_us_per_req for r in rows if r.gateway_cpu_us_per_req]
        if not rows or len(cpus) < len(rows):
            return None
        return sum(r.rps for r in rows) / len(rows), sum(cpus) / len(cpus)

    lines = []
    for mode in dict.fromkeys(r.mode for r in results if r.scenario == subject):
        this, that = means(subject, mode), means(reference, mode)
        if this is None or that is None or not that[0]:
            continue
        concurrency = next(r.concurrency for r in results if r.scenario == subject)
        lines.append(
            f"{mode} at concurrency {concurrency}: {subject_label} uses {this[1] / that[1]:.2f}x"
            f" the CPU per request of {reference_label}; throughput {this[0] / that[0]:.2f}x"
        )
    return "".join(line + "\n" for line in lines)


def billing_overhead(results: Sequence[Row]) -> str:
    """`billing-on` against `billing-off` rows (`bench billing`), per mode."""
    return side_by_side(results, "billing-on", "billing-off", labels=("billing on", "billing off"))


def events_overhead(results: Sequence[Row]) -> str:
    """`events-all` against `events-none` rows (`bench events`), per mode."""
    return side_by_side(
        results, "events-all", "events-none", labels=("success sampling 1.0", "sampling 0")
    )


def guardrails_overhead(results: Sequence[Row]) -> str:
    """`pii-guardrail` against `no-plugins` rows (`bench guardrails`), per mode."""
    return side_by_side(
        results, "pii-guardrail", "no-plugins", labels=("a PII guardrail", "no plugin")
    )


def tracing_overhead(results: Sequence[Row]) -> str:
    """`tracing-on` against `tracing-off` rows (`bench tracing`), per mode."""
    return side_by_side(results, "tracing-on", "tracing-off", labels=("tracing on", "tracing off"))


def head_against_base(results: Sequence[Row]) -> str:
    """`head` against `base` rows (`bench compare`), per mode."""
    return side_by_side(results, "head", "base")


def write_csv(path: Path | str, rows: Iterable[Row]) -> None:
    """One header line of `Row` field names, then one line per row; None is written empty."""
    names = [f.name for f in fields(Row)]
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=names)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in asdict(row).items()})


def read_csv(path: Path | str) -> list[Row]:
    """The rows `write_csv` wrote."""
    kinds = {f.name: str(f.type) for f in fields(Row)}
    rows = []
    with open(path, newline="") as fh:
        for record in csv.DictReader(fh):
            values: dict[str, object] = {}
            for name, text in record.items():
                kind = kinds[name]
                if kind == "str":
                    values[name] = text
                elif kind == "int":
                    values[name] = int(text)
                elif text == "":
                    values[name] = None
                else:
                    values[name] = float(text)
            rows.append(Row(**values))  # type: ignore[arg-type]
    return rows


def write_plots(out_dir: Path | str, rows: Sequence[Row]) -> list[Path]:
    """latency.png (p50 and p99) and throughput.png, each with a JSON and an SSE panel, one line
    per scenario against concurrency. Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Single points (slow streams at N, the workers, billing, events and revision comparisons) would
    # only clutter the lines.
    plotted = [
        r
        for r in rows
        if r.scenario != SLOW_STREAMS
        and not r.scenario.startswith(("workers-", "billing-", "events-"))
        and r.scenario not in ("base", "head")
    ]
    modes = [m for m in ("json", "sse") if any(r.mode == m for r in plotted)] or ["json"]
    scenarios = list(dict.fromkeys(r.scenario for r in plotted))
    written = []
    for name, title in (("latency", "latency (ms)"), ("throughput", "throughput (req/s)")):
        fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4.5), squeeze=False)
        for ax, mode in zip(axes[0], modes, strict=True):
            for scenario in scenarios:
                points = sorted(
                    (r for r in plotted if r.mode == mode and r.scenario == scenario),
                    key=lambda r: r.concurrency,
                )
                if not points:
                    continue
                x = [r.concurrency for r in points]
                if name == "latency":
                    ax.plot(x, [r.p50_ms for r in points], marker="o", label=f"{scenario} p50")
                    ax.plot(
                        x, [r.p99_ms for r in points], marker="x", ls="--", label=f"{scenario} p99"
                    )
                else:
                    ax.plot(x, [r.rps for r in points], marker="o", label=scenario)
            concurrencies = sorted({r.concurrency for r in plotted if r.mode == mode})
            if len(concurrencies) > 1:
                ax.set_xscale("log", base=2)
            if concurrencies:
                ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
            ax.set_title(f"{mode.upper()}: {title}")
            ax.set_xlabel("concurrency")
            ax.set_ylabel(title)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend()
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


class Progress:
    """A one-line progress bar redrawn with `\\r` on stderr, at most 10 times a second; silent when
    the stream is not a terminal. Progress is by count (`total`) or by time (`duration_s`)."""

    def __init__(
        self,
        label: str,
        *,
        total: int | None = None,
        duration_s: float | None = None,
        stream: TextIO | None = None,
        width: int = 30,
    ) -> None:
        self.label = label
        self.total = total
        self.duration_s = duration_s
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.width = width
        self.done = 0
        self._start = time.monotonic()
        self._drawn = 0.0

    def update(self, done: int) -> None:
        self.done = done
        now = time.monotonic()
        if self.enabled and now - self._drawn >= 0.1:
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = now - self._start
        if self.total:
            fraction = self.done / self.total
        elif self.duration_s:
            fraction = elapsed / self.duration_s
        else:
            fraction = 0.0
        fraction = min(max(fraction, 0.0), 1.0)
        filled = int(fraction * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        count = f"{self.done}/{self.total}" if self.total else str(self.done)
        self.stream.write(f"\r{self.label} [{bar}] {count} req {elapsed:5.1f}s\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
