"""In-process Prometheus metrics, rendered as the text exposition format. No I/O.

Only what operators act on: request counts and latency by route and status, and gauges read
at scrape time (actors, restarts, auth cache). Each worker process exposes its own.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable

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

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self._requests[(method, route, status)] += 1
        self._latency[route].observe(seconds)

    def gauge(self, name: str, help: str, read: Gauge) -> None:
        """Register a gauge whose samples are read at scrape time."""
        self._gauges.append((name, help, read))

    def render(self) -> str:
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
