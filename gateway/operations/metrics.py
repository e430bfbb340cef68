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
from gateway.operations.metrics_shared import (
    ENV,
    GAUGE_INTERVAL_S,
    WORKER_ENV,
    Entry,
    SharedMetrics,
)

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


class _Count:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0

    def inc(self, amount: float = 1, /) -> None:
        self.value += amount


# Entries cached per raw (method, route, status, model, deployment): bounded, since a model
# name may be a client's (its label is `other`, but the raw name is the cache's key).
_MAX_ENTRIES = 10_000


class Metrics:
    def __init__(self, buckets: tuple[float, ...] = BASE_BUCKETS) -> None:
        self.buckets = buckets
        self.labels = LabelValues()
        self._entries: dict[tuple[str, str, int, str | None, str | None], Entry] = {}
        self._requests: dict[tuple[str, str, str, str, str], _Count] = {}
        self._histograms: dict[tuple[str, str, str, str], tuple[_Histogram, _Histogram]] = {}
        self._usage: dict[tuple[str, str], tuple[_Count, _Count, _Count]] = {}
        self._limited: dict[tuple[str, str], _Count] = {}
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
        self._entries.clear()

    def observe_request(self, facts: RequestFacts, route: str, status: int, seconds: float) -> None:
        """A finished request: `route` its template, `status` as logged, `seconds` taken."""
        key = (facts.method, route, status, facts.model, facts.deployment)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._new_entry(key)
        entry.count.inc()
        entry.latency.observe(seconds)
        if facts.stream and facts.first_byte_at is not None and status < 400:
            entry.ttfb.observe(facts.first_byte_at - facts.started)
        if entry.limited is not None:
            entry.limited.inc()
        tokens_in, cost = facts.prompt_tokens, facts.cost_usd
        if tokens_in is not None or cost is not None:
            if tokens_in:
                entry.tokens_in.inc(tokens_in)
            if facts.completion_tokens:
                entry.tokens_out.inc(facts.completion_tokens)
            if cost:
                entry.cost.inc(cost)

    def _new_entry(self, key: tuple[str, str, int, str | None, str | None]) -> Entry:
        """The series a request of `key` adds to, its labels bounded (metric_labels.py)."""
        if len(self._entries) >= _MAX_ENTRIES:
            self._entries.clear()
        method, route, status, raw_model, deployment = key
        model = self.labels.model(raw_model)
        provider = self.labels.provider(deployment)
        klass = status_class(status)
        limited = str(status) if status in (402, 429) else None
        if self._shared is not None:
            entry = self._shared.entry(method, route, klass, model, provider, limited)
        else:
            entry = self._local_entry(method, route, klass, model, provider, limited)
        self._entries[key] = entry
        return entry

    def _local_entry(
        self, method: str, route: str, klass: str, model: str, provider: str, limited: str | None
    ) -> Entry:
        count = self._requests.setdefault((method, route, klass, model, provider), _Count())
        pair = self._histograms.get((route, klass, model, provider))
        if pair is None:
            pair = (_Histogram(self.buckets), _Histogram(self.buckets))
            self._histograms[(route, klass, model, provider)] = pair
        usage = self._usage.get((model, provider))
        if usage is None:
            usage = self._usage[(model, provider)] = (_Count(), _Count(), _Count())
        refused = None
        if limited is not None:
            refused = self._limited.setdefault((route, limited), _Count())
        return Entry(count, pair[0], pair[1], refused, *usage)

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
                out.append(f"{name}_total{_labels(sample_labels)} {_number(value)}")
        for name, help, read in self._gauges:
            _family(out, name, "gauge", help)
            for sample_labels, value in read():
                out.append(f"{name}{_labels(sample_labels)} {value}")
        return "\n".join(out) + "\n" + generate_latest(_PROCESS).decode()

    def _render_requests(self, out: list[str]) -> None:
        _family(out, "gateway_requests_total", "counter", _REQUESTS_HELP)
        for (method, route, klass, model, provider), count in sorted(self._requests.items()):
            labels = _labels(
                {
                    "method": method,
                    "route": route,
                    "status_class": klass,
                    "model": model,
                    "provider": provider,
                }
            )
            out.append(f"gateway_requests_total{labels} {_number(count.value)}")
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
            out.append(f"gateway_limited_requests_total{labels} {_number(count.value)}")

    def _render_usage(self, out: list[str]) -> None:
        _family(out, "gateway_tokens_total", "counter", _TOKENS_HELP)
        used = sorted((k, v) for k, v in self._usage.items() if any(c.value for c in v))
        for (model, provider), (tokens_in, tokens_out, _) in used:
            for kind, tokens in (("input", tokens_in), ("output", tokens_out)):
                labels = _labels({"model": model, "provider": provider, "type": kind})
                out.append(f"gateway_tokens_total{labels} {_number(tokens.value)}")
        _family(out, "gateway_cost_usd_total", "counter", _COST_HELP)
        for (model, provider), (_, _, cost) in used:
            labels = _labels({"model": model, "provider": provider})
            out.append(f"gateway_cost_usd_total{labels} {float(cost.value)!r}")
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


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


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
