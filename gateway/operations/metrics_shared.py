"""Metrics shared by every `--workers` process, through prometheus_client's multiprocess mode:
each worker writes its values to memory-mapped files in PROMETHEUS_MULTIPROC_DIR (set by the
parent before it starts the workers), and a scrape answered by any worker reads them all.

Choices (measured in docs/decisions.md):
- request counts and latency are summed over every worker that ever ran (counters stay
  monotonic when a worker dies);
- gauges are per worker (`liveall`: one series per live worker, labelled `pid`), since actors
  and caches are each worker's own; a dead worker's are dropped (`mark_process_dead`);
- gauges are read from their callbacks every GAUGE_INTERVAL_S and before this worker answers
  a scrape: another worker's may be that old. So are counters read from callbacks (actor
  restarts): each worker adds what grew since its last publication, and they are summed;
- the process's own figures (`process_*`, `python_*`) are each worker's, labelled `worker`
  (its index): counters summed over the processes that had that index (a restarted worker's
  CPU time adds to its predecessor's), gauges those of the live process only.
Label children are cached per label tuple: `labels()` alone cost ~5 µs per call.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal, Protocol

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

ENV = "PROMETHEUS_MULTIPROC_DIR"
WORKER_ENV = "GATEWAY_WORKER_INDEX"  # set by each worker for itself (gateway/server/workers.py)
GAUGE_INTERVAL_S = 5.0

GaugeRead = Callable[[], Iterable[tuple[dict[str, str], float]]]
Registered = Iterable[tuple[str, str, GaugeRead]]


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


class Inc(Protocol):
    def inc(self, amount: float = 1, /) -> None: ...


class Observe(Protocol):
    def observe(self, amount: float, /) -> None: ...


@dataclass(frozen=True, slots=True)
class Entry:
    """What one kind of finished request (method, route, status, model, deployment) adds to:
    prometheus_client's children here, in-process counts in metrics.py."""

    count: Inc
    latency: Observe
    ttfb: Observe
    limited: Inc | None  # 402 and 429 only
    tokens_in: Inc
    tokens_out: Inc
    cost: Inc


class _Lazy:
    """A counter child made on its first increment: a request kind that never has tokens (no
    model) leaves no series of zeros in the files."""

    __slots__ = ("_child", "_make")

    def __init__(self, make: Callable[[], Counter]) -> None:
        self._make = make
        self._child: Counter | None = None

    def inc(self, amount: float = 1, /) -> None:
        child = self._child
        if child is None:
            child = self._child = self._make()
        child.inc(amount)


class SharedMetrics:
    def __init__(self, buckets: tuple[float, ...], *, worker: str = "0") -> None:
        # Own registry: the default one would also export this process's figures as if they
        # were every worker's (they are published per worker instead: `_publish_process`).
        self._registry = CollectorRegistry()
        self._worker = worker
        self._requests = Counter(
            "gateway_requests",
            "HTTP requests answered, by route, status class, model and provider.",
            ("method", "route", "status_class", "model", "provider"),
            registry=self._registry,
        )
        labels = ("route", "status_class", "model", "provider")
        self._latency = Histogram(
            "gateway_request_duration_seconds",
            "Time to answer (to the end of the response), by route, status class, model.",
            labels,
            buckets=buckets,
            registry=self._registry,
        )
        self._ttfb = Histogram(
            "gateway_time_to_first_byte_seconds",
            "Streamed answers: time to the response's head (the upstream's first byte).",
            labels,
            buckets=buckets,
            registry=self._registry,
        )
        self._limited = Counter(
            "gateway_limited_requests",
            "Requests answered 402 (balance, budget) or 429 (rate limits), by route.",
            ("route", "status"),
            registry=self._registry,
        )
        self._tokens = Counter(
            "gateway_tokens",
            "Tokens of answered requests by model and provider; type: input or output.",
            ("model", "provider", "type"),
            registry=self._registry,
        )
        self._cost = Counter(
            "gateway_cost_usd",
            "What requests cost (USD, as charged; 0 with the org's own key), by model, provider.",
            ("model", "provider"),
            registry=self._registry,
        )
        self._attempts = Histogram(
            "gateway_upstream_attempt_duration_seconds",
            "Upstream attempts by provider and outcome: seconds to the answer (its head for a"
            " stream).",
            ("provider", "outcome"),
            buckets=buckets,
            registry=self._registry,
        )
        self._attempt_children: dict[tuple[str, str], Histogram] = {}
        # name -> the gauge, its label names, and the label values it has published
        self._gauges: dict[str, tuple[Gauge, tuple[str, ...], set[tuple[str, ...]]]] = {}
        # name -> the counter, its label names, and what it was published at, per labels
        self._counters: dict[str, tuple[Counter, tuple[str, ...], dict[tuple[str, ...], float]]]
        self._counters = {}
        self._process = CollectorRegistry()
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self._process.register(collector)

    def entry(
        self, method: str, route: str, klass: str, model: str, provider: str, limited: str | None
    ) -> Entry:
        """The children one kind of finished request adds to (cached by Metrics)."""
        return Entry(
            self._requests.labels(method, route, klass, model, provider),
            self._latency.labels(route, klass, model, provider),
            self._ttfb.labels(route, klass, model, provider),
            None if limited is None else self._limited.labels(route, limited),
            _Lazy(partial(self._tokens.labels, model, provider, "input")),
            _Lazy(partial(self._tokens.labels, model, provider, "output")),
            _Lazy(partial(self._cost.labels, model, provider)),
        )

    def attempt(self, provider: str, outcome: str, seconds: float) -> None:
        child = self._attempt_children.get((provider, outcome))
        if child is None:
            child = self._attempts.labels(provider, outcome)
            self._attempt_children[(provider, outcome)] = child
        child.observe(seconds)

    def publish(self, gauges: Registered, counters: Registered = ()) -> None:
        """Write this worker's gauge values, counters read from callbacks and process figures
        to its files."""
        for name, help, read in gauges:
            self._set_gauge(name, help, (), list(read()))
        for name, help, read in counters:
            self._add_to_counter(name, help, list(read()))
        self._publish_process()

    def _set_gauge(
        self,
        name: str,
        help: str,
        extra: tuple[str, ...],
        samples: list[tuple[dict[str, str], float]],
        mode: Literal["liveall", "livesum"] = "liveall",
    ) -> None:
        known = self._gauges.get(name)
        if known is None:
            names = tuple(sorted(samples[0][0])) if samples else extra
            gauge = Gauge(name, help, names, registry=None, multiprocess_mode=mode)
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

    def _add_to_counter(
        self, name: str, help: str, samples: list[tuple[dict[str, str], float]]
    ) -> None:
        known = self._counters.get(name)
        if known is None:
            if not samples:
                return
            names = tuple(sorted(samples[0][0]))
            counter = Counter(name, help, names, registry=None)
            known = self._counters[name] = (counter, names, {})
        counter, names, published = known
        for labels, value in samples:
            values = tuple(labels[n] for n in names)
            grown = value - published.get(values, 0.0)
            child = counter.labels(*values) if values else counter
            if grown > 0 or values not in published:
                child.inc(max(grown, 0.0))
                published[values] = max(value, published.get(values, 0.0))

    def _publish_process(self) -> None:
        """This worker's `process_*` and `python_*` figures, labelled `worker`."""
        for family in self._process.collect():
            if family.type == "counter":
                samples = [
                    ({**s.labels, "worker": self._worker}, s.value)
                    for s in family.samples
                    if s.name.endswith("_total")
                ]
                self._add_to_counter(family.name, family.documentation, samples)
            else:
                samples = [({**s.labels, "worker": self._worker}, s.value) for s in family.samples]
                self._set_gauge(
                    family.name, family.documentation, ("worker",), samples, mode="livesum"
                )

    def render(self, gauges: Registered, counters: Registered = ()) -> str:
        self.publish(gauges, counters)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry).decode()
