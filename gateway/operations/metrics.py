"""In-process Prometheus metrics, rendered as the text exposition format. No I/O.

Only what operators act on: request counts and latency by route and status, and gauges read
at scrape time (actors, restarts, auth cache). One process keeps them in memory (~1 µs a
request); under `gateway serve --workers N` (PROMETHEUS_MULTIPROC_DIR set by the parent) they
are shared by every worker through metrics_shared.py beside this module, so any worker's
scrape covers all of them.
"""

from __future__ import annotations

import bisect
import os
from collections import defaultdict
from collections.abc import Callable, Iterable

import trio

from gateway.operations.metrics_shared import ENV, GAUGE_INTERVAL_S, SharedMetrics

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _Histogram:
    __slots__ = ("counts", "sum", "total")

    def __init__(self) -> None:
        self.counts = [0] * len(_BUCKETS)
        self.sum = 0.0
        self.total = 0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(_BUCKETS, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.sum += value
        self.total += 1


Gauge = Callable[[], Iterable[tuple[dict[str, str], float]]]


class Metrics:
    def __init__(self) -> None:
        self._requests: defaultdict[tuple[str, str, int], int] = defaultdict(int)
        self._latency: defaultdict[str, _Histogram] = defaultdict(_Histogram)
        self._gauges: list[tuple[str, str, Gauge]] = []
        self._shared = SharedMetrics(_BUCKETS) if os.environ.get(ENV) else None

    @property
    def shared(self) -> bool:
        return self._shared is not None

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        if self._shared is not None:
            self._shared.observe(method, route, status, seconds)
            return
        self._requests[(method, route, status)] += 1
        self._latency[route].observe(seconds)

    async def publish_gauges(self) -> None:
        """Shared across workers: write this worker's gauges every GAUGE_INTERVAL_S, so that
        another worker's scrape sees them. Returns at once otherwise; runs until cancelled."""
        if self._shared is None:
            return
        while True:
            self._shared.publish(self._gauges)
            await trio.sleep(GAUGE_INTERVAL_S)

    def gauge(self, name: str, help: str, read: Gauge) -> None:
        """Register a gauge whose samples are read at scrape time."""
        self._gauges.append((name, help, read))

    def render(self) -> str:
        if self._shared is not None:
            return self._shared.render(self._gauges)
        out: list[str] = [
            "# HELP gateway_requests_total HTTP requests answered, by route and status.",
            "# TYPE gateway_requests_total counter",
        ]
        for (method, route, status), count in sorted(self._requests.items()):
            labels = _labels({"method": method, "route": route, "status": str(status)})
            out.append(f"gateway_requests_total{labels} {count}")
        out += [
            "# HELP gateway_request_duration_seconds Time to answer, by route.",
            "# TYPE gateway_request_duration_seconds histogram",
        ]
        for route, hist in sorted(self._latency.items()):
            cumulative = 0
            for bound, count in zip(_BUCKETS, hist.counts, strict=True):
                cumulative += count
                labels = _labels({"route": route, "le": repr(bound)})
                out.append(f"gateway_request_duration_seconds_bucket{labels} {cumulative}")
            labels = _labels({"route": route, "le": "+Inf"})
            out.append(f"gateway_request_duration_seconds_bucket{labels} {hist.total}")
            out.append(
                f"gateway_request_duration_seconds_sum{_labels({'route': route})} {hist.sum}"
            )
            out.append(
                f"gateway_request_duration_seconds_count{_labels({'route': route})} {hist.total}"
            )
        for name, help, read in self._gauges:
            out += [f"# HELP {name} {help}", f"# TYPE {name} gauge"]
            for sample_labels, value in read():
                out.append(f"{name}{_labels(sample_labels)} {value}")
        return "\n".join(out) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
