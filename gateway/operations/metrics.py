"""In-process Prometheus metrics, rendered as the text exposition format. No I/O.

What operators act on: requests by route, status class, model and provider (count, latency,
time to first byte of streams), tokens and cost per model, 402 and 429 answers, upstream
attempts per provider, gauges and counters read at scrape time (actors, caches, ...) and the
process's own figures (`process_*`, `python_*`). Everything a request adds is recorded once, at
its end (`observe_request`, called by the request middleware), from its `RequestContext`.

One process keeps them in plain dicts (a look-up and a few additions a request); under
`gateway serve --workers N` (PROMETHEUS_MULTIPROC_DIR set by the parent) they are shared by
every worker through metrics_shared.py beside this module, so any worker's scrape covers all
of them. Label values are bounded (metric_labels.py): configured models and providers only.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable
from typing import Protocol

import trio
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)

from gateway.operations.metric_labels import LabelValues, status_class
from gateway.operations.metrics_shared import ENV, GAUGE_INTERVAL_S, WORKER_ENV, SharedMetrics

# Seconds. Up to 600 s, the default `read_timeout_s`; a provider's longer `read_timeout_s` is
# added as the last bucket (`duration_buckets`). docs/decisions.md, "Metrics: labels, buckets".
BASE_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


def duration_buckets(read_timeouts: Iterable[float] = ()) -> tuple[float, ...]:
    """The buckets of every duration histogram: BASE_BUCKETS plus each provider's
    `read_timeout_s` (a stream may last that long between two reads; a stuck upstream's
    attempts and first bytes pile up there)."""
    return tuple(sorted({*BASE_BUCKETS, *read_timeouts}))


class RequestFacts(Protocol):
    """What a finished request tells the metrics (gateway/web/context.py `RequestContext`)."""

    method: str
    model: str | None
    deployment: str | None  # `<provider>/<upstream>` that answered
    stream: bool
    started: float  # time.perf_counter()
    first_byte_at: float | None  # time.perf_counter() when the response's head went out
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None


Samples = Iterable[tuple[dict[str, str], float]]
Read = Callable[[], Samples]


class _Histogram:
    __slots__ = ("buckets", "counts", "sum", "total")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.total = 0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.sum += value
        self.total += 1


class _Series:
    """One (method, route, status class, model, provider): its count, and the latency and
    time-to-first-byte histograms it shares with the other methods."""

    __slots__ = ("count", "latency", "ttfb")

    def __init__(self, latency: _Histogram, ttfb: _Histogram) -> None:
        self.count = 0
        self.latency = latency
        self.ttfb = ttfb


class _Usage:
    __slots__ = ("cost", "input", "output")

    def __init__(self) -> None:
        self.input = 0
        self.output = 0
        self.cost = 0.0


class Metrics:
    def __init__(self, buckets: tuple[float, ...] = BASE_BUCKETS) -> None:
        self.buckets = buckets
        self.labels = LabelValues()
        self._series: dict[tuple[str, str, str, str, str], _Series] = {}
        self._histograms: dict[tuple[str, str, str, str], tuple[_Histogram, _Histogram]] = {}
        self._usage: dict[tuple[str, str], _Usage] = {}
        self._limited: dict[tuple[str, str], int] = {}
        self._attempts: dict[tuple[str, str], _Histogram] = {}
        self._gauges: list[tuple[str, str, Read]] = []
        self._counters: list[tuple[str, str, Read]] = []
        self._shared = (
            SharedMetrics(buckets, worker=os.environ.get(WORKER_ENV, "0"))
            if os.environ.get(ENV)
            else None
        )

    @property
    def shared(self) -> bool:
        return self._shared is not None

    def know(self, models: Iterable[str], providers: Iterable[str]) -> None:
        """The configured model ids and provider names: the only `model` and `provider` label
        values besides `other` and `none`."""
        self.labels = LabelValues(models, providers)

    def observe_request(self, facts: RequestFacts, route: str, status: int, seconds: float) -> None:
        """A finished request: `route` its template, `status` as logged, `seconds` taken."""
        labels = self.labels
        model = labels.model(facts.model)
        provider = labels.provider(facts.deployment)
        klass = status_class(status)
        ttfb = None
        if facts.stream and facts.first_byte_at is not None and status < 400:
            ttfb = facts.first_byte_at - facts.started
        shared = self._shared
        if shared is not None:
            shared.request(facts.method, route, klass, model, provider, seconds, ttfb)
        else:
            key = (facts.method, route, klass, model, provider)
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = self._new_series(route, klass, model, provider)
            series.count += 1
            series.latency.observe(seconds)
            if ttfb is not None:
                series.ttfb.observe(ttfb)
        if status == 402 or status == 429:
            if shared is not None:
                shared.limited(route, status)
            else:
                limited = (route, str(status))
                self._limited[limited] = self._limited.get(limited, 0) + 1
        if facts.prompt_tokens is not None or facts.cost_usd is not None:
            tokens_in = facts.prompt_tokens or 0
            tokens_out = facts.completion_tokens or 0
            cost = facts.cost_usd or 0.0
            if shared is not None:
                shared.usage(model, provider, tokens_in, tokens_out, cost)
                return
            usage = self._usage.get((model, provider))
            if usage is None:
                usage = self._usage[(model, provider)] = _Usage()
            usage.input += tokens_in
            usage.output += tokens_out
            usage.cost += cost

    def _new_series(self, route: str, klass: str, model: str, provider: str) -> _Series:
        key = (route, klass, model, provider)
        pair = self._histograms.get(key)
        if pair is None:
            pair = self._histograms[key] = (_Histogram(self.buckets), _Histogram(self.buckets))
        return _Series(*pair)

    def observe_attempt(self, provider: str, outcome: str, seconds: float) -> None:
        """One upstream attempt on `provider` (a configured name), ended with `outcome` (one
        of metric_labels.OUTCOMES) after `seconds` (to its answer's head for a stream)."""
        if self._shared is not None:
            self._shared.attempt(provider, outcome, seconds)
            return
        hist = self._attempts.get((provider, outcome))
        if hist is None:
            hist = self._attempts[(provider, outcome)] = _Histogram(self.buckets)
        hist.observe(seconds)

    async def publish_gauges(self) -> None:
        """Shared across workers: write this worker's gauges and read counters every
        GAUGE_INTERVAL_S, so that another worker's scrape sees them. Returns at once otherwise;
        runs until cancelled."""
        if self._shared is None:
            return
        while True:
            self._shared.publish(self._gauges, self._counters)
            await trio.sleep(GAUGE_INTERVAL_S)

    def gauge(self, name: str, help: str, read: Read) -> None:
        """Register a gauge whose samples are read at scrape time."""
        self._gauges.append((name, help, read))

    def counter(self, name: str, help: str, read: Read) -> None:
        """Register a counter (`name` without `_total`) whose values are read at scrape time;
        they must never decrease (with workers, each worker's are summed)."""
        self._counters.append((name, help, read))

    def render(self) -> str:
        if self._shared is not None:
            return self._shared.render(self._gauges, self._counters)
        out: list[str] = []
        self._render_requests(out)
        self._render_usage(out)
        for name, help, read in self._counters:
            _family(out, f"{name}_total", "counter", help)
            for sample_labels, value in read():
                out.append(f"{name}_total{_labels(sample_labels)} {value}")
        for name, help, read in self._gauges:
            _family(out, name, "gauge", help)
            for sample_labels, value in read():
                out.append(f"{name}{_labels(sample_labels)} {value}")
        return "\n".join(out) + "\n" + generate_latest(_PROCESS).decode()

    def _render_requests(self, out: list[str]) -> None:
        _family(out, "gateway_requests_total", "counter", _REQUESTS_HELP)
        for (method, route, klass, model, provider), series in sorted(self._series.items()):
            labels = _labels(
                {
                    "method": method,
                    "route": route,
                    "status_class": klass,
                    "model": model,
                    "provider": provider,
                }
            )
            out.append(f"gateway_requests_total{labels} {series.count}")
        for name, help, index in (
            ("gateway_request_duration_seconds", _LATENCY_HELP, 0),
            ("gateway_time_to_first_byte_seconds", _TTFB_HELP, 1),
        ):
            _family(out, name, "histogram", help)
            for (route, klass, model, provider), pair in sorted(self._histograms.items()):
                if pair[index].total:
                    tags = {"route": route, "status_class": klass, "model": model}
                    _histogram(out, name, {**tags, "provider": provider}, pair[index])
        _family(out, "gateway_limited_requests_total", "counter", _LIMITED_HELP)
        for (route, status), count in sorted(self._limited.items()):
            labels = _labels({"route": route, "status": status})
            out.append(f"gateway_limited_requests_total{labels} {count}")

    def _render_usage(self, out: list[str]) -> None:
        _family(out, "gateway_tokens_total", "counter", _TOKENS_HELP)
        for (model, provider), usage in sorted(self._usage.items()):
            for kind, tokens in (("input", usage.input), ("output", usage.output)):
                labels = _labels({"model": model, "provider": provider, "type": kind})
                out.append(f"gateway_tokens_total{labels} {tokens}")
        _family(out, "gateway_cost_usd_total", "counter", _COST_HELP)
        for (model, provider), usage in sorted(self._usage.items()):
            labels = _labels({"model": model, "provider": provider})
            out.append(f"gateway_cost_usd_total{labels} {usage.cost!r}")
        _family(out, "gateway_upstream_attempt_duration_seconds", "histogram", _ATTEMPT_HELP)
        for (provider, outcome), hist in sorted(self._attempts.items()):
            tags = {"provider": provider, "outcome": outcome}
            _histogram(out, "gateway_upstream_attempt_duration_seconds", tags, hist)


_REQUESTS_HELP = "HTTP requests answered, by route, status class, model and provider."
_LATENCY_HELP = "Time to answer (to the end of the response), by route, status class, model."
_TTFB_HELP = "Streamed answers: time to the response's head (the upstream's first byte)."
_LIMITED_HELP = "Requests answered 402 (balance, budget) or 429 (rate limits), by route."
_TOKENS_HELP = "Tokens of answered requests by model and provider; type: input or output."
_COST_HELP = "What requests cost (USD, as charged; 0 with the org's own key), by model, provider."
_ATTEMPT_HELP = (
    "Upstream attempts by provider and outcome: seconds to the answer (its head for a stream)."
)

# The process's own figures (process_*, python_*), exported as prometheus_client makes them.
_PROCESS = CollectorRegistry(auto_describe=True)
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    _PROCESS.register(_collector)


def _family(out: list[str], name: str, kind: str, help: str) -> None:
    out += [f"# HELP {name} {help}", f"# TYPE {name} {kind}"]


def _histogram(out: list[str], name: str, labels: dict[str, str], hist: _Histogram) -> None:
    cumulative = 0
    for bound, count in zip(hist.buckets, hist.counts, strict=True):
        cumulative += count
        out.append(f"{name}_bucket{_labels({**labels, 'le': repr(bound)})} {cumulative}")
    out.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {hist.total}")
    out.append(f"{name}_sum{_labels(labels)} {hist.sum!r}")
    out.append(f"{name}_count{_labels(labels)} {hist.total}")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
