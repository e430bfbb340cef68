"""Metrics shared by every `--workers` process, through prometheus_client's multiprocess mode:
each worker writes its values to memory-mapped files in PROMETHEUS_MULTIPROC_DIR (set by the
parent before it starts the workers), and a scrape answered by any worker reads them all.

Choices (measured in docs/decisions.md):
- request counts and latency are summed over every worker that ever ran (counters stay
  monotonic when a worker dies);
- gauges are per worker (`liveall`: one series per live worker, labelled `pid`), since actors
  and caches are each worker's own; a dead worker's are dropped (`mark_process_dead`);
- gauges are read from their callbacks every GAUGE_INTERVAL_S and before this worker answers
  a scrape: another worker's may be that old.
Label children are cached per label tuple: `labels()` alone cost ~5 µs per call.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

ENV = "PROMETHEUS_MULTIPROC_DIR"
GAUGE_INTERVAL_S = 5.0

GaugeRead = Callable[[], Iterable[tuple[dict[str, str], float]]]


def prepare_directory(path: Path) -> None:
    """Empty (or create) the directory: files of a previous run would be counted again."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def mark_dead(pid: int, path: Path) -> None:
    """A worker exited: drop its live gauges (its counts stay in the totals)."""
    multiprocess.mark_process_dead(pid, str(path))  # type: ignore[no-untyped-call]


def count_worker_start(*, restarted: bool, first: bool) -> None:
    """Called by each worker as it starts. The parent of the workers serves no HTTP, so its
    restarts are counted here, by the worker that replaces a dead one, in the shared files:
    any worker's scrape shows `gateway_worker_restarts_total` summed over every process that
    ever ran. The first worker writes a 0 so that the series exists before any restart."""
    if not (restarted or first):
        return
    counter = Counter(
        "gateway_worker_restarts",
        "Workers of `gateway serve --workers N` restarted after they died.",
        registry=None,
    )
    if restarted:
        counter.inc()


class SharedMetrics:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        # Own registry: the default one would also export process and platform metrics.
        self._registry = CollectorRegistry()
        self._requests = Counter(
            "gateway_requests",
            "HTTP requests answered, by route and status.",
            ("method", "route", "status"),
            registry=self._registry,
        )
        self._latency = Histogram(
            "gateway_request_duration_seconds",
            "Time to answer, by route.",
            ("route",),
            buckets=buckets,
            registry=self._registry,
        )
        self._request_children: dict[tuple[str, str, int], Counter] = {}
        self._latency_children: dict[str, Histogram] = {}
        # name -> the gauge, its label names, and the label values it has published
        self._gauges: dict[str, tuple[Gauge, tuple[str, ...], set[tuple[str, ...]]]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        counter = self._request_children.get((method, route, status))
        if counter is None:
            counter = self._requests.labels(method, route, str(status))
            self._request_children[(method, route, status)] = counter
        counter.inc()
        hist = self._latency_children.get(route)
        if hist is None:
            hist = self._latency_children[route] = self._latency.labels(route)
        hist.observe(seconds)

    def publish(self, gauges: Iterable[tuple[str, str, GaugeRead]]) -> None:
        """Write this worker's gauge values to its files."""
        for name, help, read in gauges:
            samples = list(read())
            known = self._gauges.get(name)
            if known is None:
                names = tuple(sorted(samples[0][0])) if samples else ()
                gauge = Gauge(name, help, names, registry=None, multiprocess_mode="liveall")
                known = self._gauges[name] = (gauge, names, set())
            gauge, names, seen = known
            current: set[tuple[str, ...]] = set()
            for labels, value in samples:
                values = tuple(labels[n] for n in names)
                current.add(values)
                (gauge.labels(*values) if values else gauge).set(value)
            # The files cannot forget a series: one that went away (an actor's state changed)
            # reads 0 from now on.
            for gone in seen - current:
                gauge.labels(*gone).set(0)
            seen |= current

    def render(self, gauges: Iterable[tuple[str, str, GaugeRead]]) -> str:
        self.publish(gauges)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry).decode()
