"""The instance's own figures for the operator's overview, read from this process's Prometheus
text (the same `/metrics` renders, so `--workers N` shows every worker's counts merged, as a
scrape does): requests by status class, latency and time-to-first-byte percentiles.

They cover every organization, so only the operator sees them. Percentiles are estimated from
the histogram buckets the way Prometheus's `histogram_quantile` does (linear within a bucket).
Counts start at zero when the instance starts.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

_API_PREFIX = "/v1/"


@dataclass
class InstanceFigures:
    requests: int = 0
    by_status: dict[str, int] = field(default_factory=dict)  # "2xx" -> count
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None
    ttfb_p50_s: float | None = None
    ttfb_p99_s: float | None = None
    # Cache, guardrail and plugin figures: (sample name, labels, value), gauges and counters.
    gauges: list[tuple[str, str, float]] = field(default_factory=list)


def instance_figures(text: str, gauge_prefixes: tuple[str, ...] = ()) -> InstanceFigures:
    """Figures of the API routes (`/v1/...`, the admin ones excepted) from `text`; gauges and
    counters whose family name starts with one of `gauge_prefixes` are listed as they are."""
    out = InstanceFigures()
    status: dict[str, int] = defaultdict(int)
    buckets: dict[str, dict[float, float]] = {
        "gateway_request_duration_seconds": defaultdict(float),
        "gateway_time_to_first_byte_seconds": defaultdict(float),
    }
    for family in text_string_to_metric_families(text):
        if family.name == "gateway_requests" or family.name == "gateway_requests_total":
            for sample in family.samples:
                if sample.name.endswith("_total") and _api(sample.labels.get("route", "")):
                    status[sample.labels.get("status_class", "?")] += int(sample.value)
        elif family.name in buckets:
            merged = buckets[family.name]
            for sample in family.samples:
                if sample.name.endswith("_bucket") and _api(sample.labels.get("route", "")):
                    merged[float(sample.labels["le"])] += sample.value
        elif family.type in ("gauge", "counter") and family.name.startswith(
            gauge_prefixes or ("\0",)
        ):
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                shown = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out.gauges.append((sample.name, shown, float(sample.value)))
    out.by_status = dict(sorted(status.items()))
    out.requests = sum(status.values())
    latency = buckets["gateway_request_duration_seconds"]
    ttfb = buckets["gateway_time_to_first_byte_seconds"]
    out.latency_p50_s, out.latency_p99_s = quantile(latency, 0.5), quantile(latency, 0.99)
    out.ttfb_p50_s, out.ttfb_p99_s = quantile(ttfb, 0.5), quantile(ttfb, 0.99)
    return out


def _api(route: str) -> bool:
    return route.startswith(_API_PREFIX) and not route.startswith("/v1/admin/")


def quantile(cumulative: dict[float, float], q: float) -> float | None:
    """The q-quantile of a histogram given as {upper bound: cumulative count}; None when
    empty. Above the last finite bound the answer is that bound (as Prometheus does)."""
    bounds = sorted(cumulative)
    if not bounds or cumulative[bounds[-1]] <= 0:
        return None
    total = cumulative[bounds[-1]]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower
