"""The load driver: N workers, each on its own keep-alive connection, against any
OpenAI-compatible `POST {base}/chat/completions`.

A run is always bounded: by `duration_s` (after the warmup) or by a count of `requests`. Requests
that start during the warmup are sent but not recorded, and do not count towards `requests`.
This module measures; it does not start servers or print (see suite.py and report.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter

import msgspec
import trio

from bench.http_client import (
    Connection,
    Endpoint,
    HTTPClientError,
    Response,
    StaleConnection,
    build_post,
)

# A worker whose connect fails waits this long before trying again, so a dead target does not
# turn the driver into a busy loop on the core it shares with the upstream.
_CONNECT_BACKOFF_S = 0.05


@dataclass(frozen=True)
class Scenario:
    name: str
    base_url: str
    api_key: str
    model: str
    stream: bool
    concurrency: int
    duration_s: float | None = None
    requests: int | None = None
    max_tokens: int = 20
    warmup_s: float = 0.5
    timeout_s: float = 30.0  # per request; a request over it counts as a "timeout" error
    ramp_s: float = 0.0  # workers start evenly spread over this time (large fan-outs)
    prompt: str = "Say hello in one short sentence."

    def __post_init__(self) -> None:
        if (self.duration_s is None) == (self.requests is None):
            raise ValueError("set exactly one of duration_s and requests")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")

    def request_bytes(self) -> bytes:
        """The request, built once per run."""
        body = msgspec.json.encode(
            {
                "model": self.model,
                "messages": [{"role": "user", "content": self.prompt}],
                "max_tokens": self.max_tokens,
                "stream": self.stream,
            }
        )
        endpoint = Endpoint.from_base_url(self.base_url)
        return build_post(endpoint, "/chat/completions", self.api_key, body, sse=self.stream)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between ranks; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class LoadResult:
    scenario: Scenario
    latencies_s: list[float] = field(default_factory=list)
    ttfb_s: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    completed: int = 0
    elapsed_s: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    body_bytes: int = 0
    connections: int = 0  # connections opened, warmup included

    @property
    def rps(self) -> float:
        return self.completed / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def _ms(self, values: list[float], q: float) -> float:
        return percentile(values, q) * 1000.0

    @property
    def p50_ms(self) -> float:
        return self._ms(self.latencies_s, 50)

    @property
    def p90_ms(self) -> float:
        return self._ms(self.latencies_s, 90)

    @property
    def p99_ms(self) -> float:
        return self._ms(self.latencies_s, 99)

    @property
    def ttfb_p50_ms(self) -> float:
        return self._ms(self.ttfb_s, 50)

    @property
    def ttfb_p90_ms(self) -> float:
        return self._ms(self.ttfb_s, 90)

    @property
    def ttfb_p99_ms(self) -> float:
        return self._ms(self.ttfb_s, 99)


@dataclass
class Measured:
    """A load run plus what was observed of the gateway meanwhile."""

    result: LoadResult
    peak_rss_mb: float | None = None
    cpu_us_per_request: float | None = None  # gateway CPU over the measured window / requests


class _Run:
    """The state shared by the workers of one run (one task at a time touches it: Trio)."""

    def __init__(self, scenario: Scenario, on_progress: Callable[[int], None] | None) -> None:
        self.scenario = scenario
        self.endpoint = Endpoint.from_base_url(scenario.base_url)
        self.payload = scenario.request_bytes()
        self.result = LoadResult(scenario)
        self.on_progress = on_progress
        self.measure_from = perf_counter() + scenario.warmup_s
        self.issued = 0
        self.last_finish = 0.0

    def claim(self) -> float | None:
        """The start time of one more request, or None when the run says stop.

        The caller records the request under this same instant, so a request judged to be in the
        warmup is never recorded (and one that is recorded always counted towards `requests`).
        """
        now = perf_counter()
        limit = self.scenario.requests
        if limit is None or now < self.measure_from:
            return now
        if self.issued >= limit:
            return None
        self.issued += 1
        return now

    def record(self, started: float, response: Response | None, error: str | None) -> None:
        if started < self.measure_from:
            return
        result = self.result
        if response is not None:
            result.statuses[response.status] += 1
            result.body_bytes += response.body_bytes
            self.last_finish = response.finished
        if error is not None:
            result.errors[error] += 1
        elif response is not None:
            result.completed += 1
            result.latencies_s.append(response.finished - response.started)
            result.ttfb_s.append(response.first_byte - response.started)
        if self.on_progress is not None:
            self.on_progress(result.completed + result.error_count)


class _Worker:
    """One connection, one request at a time, until the run says stop."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.conn: Connection | None = None
        self.in_flight_since = 0.0  # perf_counter() start of the request in flight, or 0
        self.scope = trio.CancelScope()

    async def exchange(self) -> Response:
        """One request, retried once on a fresh connection if a reused one went stale."""
        run = self.run
        for _attempt in range(2):
            if self.conn is None:
                self.conn = await Connection.open(run.endpoint)
                run.result.connections += 1
            try:
                return await self.conn.request(run.payload, sse=run.scenario.stream)
            except StaleConnection:
                if self.conn.requests == 0:
                    raise
                await self.drop()
        raise AssertionError("unreachable")

    async def drop(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            await conn.aclose()

    async def run_until_done(self, delay: float) -> None:
        """Send requests until the run says stop.

        The watchdog cancels `self.scope` when a request outlives the timeout: that request is
        recorded as a "timeout" and the worker goes on with a new scope (one scope per timeout
        rather than one per request keeps the hot path cheap). Cancelling the run ends the
        worker at once; the request in flight is then not recorded.
        """
        try:
            await trio.sleep(delay)
            while True:
                with trio.CancelScope() as scope:
                    self.scope = scope
                    await self._requests()
                    return
                self.run.record(self.in_flight_since, None, "timeout")
                self.in_flight_since = 0.0
                await self.drop()
        finally:
            with trio.CancelScope(shield=True):
                await self.drop()

    async def _requests(self) -> None:
        run = self.run
        while (started := run.claim()) is not None:
            self.in_flight_since = started
            response: Response | None = None
            error: str | None = None
            try:
                response = await self.exchange()
                if response.status >= 400:
                    error = f"status_{response.status}"
            except HTTPClientError as exc:
                error = exc.kind
            self.in_flight_since = 0.0
            if error is not None or (self.conn is not None and not self.conn.reusable):
                await self.drop()
            run.record(started, response, error)
            if error == "connect":
                await trio.sleep(_CONNECT_BACKOFF_S)


async def _watchdog(workers: list[_Worker], limit_s: float) -> None:
    """Cancel requests older than `limit_s`, checking a few times per limit. Runs until
    cancelled."""
    tick = min(max(limit_s / 8, 0.005), 0.25)
    while True:
        await trio.sleep(tick)
        now = perf_counter()
        for worker in workers:
            since = worker.in_flight_since
            if since and now - since >= limit_s:
                worker.scope.cancel()


async def run_load(
    scenario: Scenario, *, on_progress: Callable[[int], None] | None = None
) -> LoadResult:
    """Drive `scenario` to its end and return what was measured.

    Stops by itself: after `warmup_s + duration_s`, or once `requests` recorded requests are done.
    Cancelling it stops every worker and closes every connection.
    """
    run = _Run(scenario, on_progress)
    workers = [_Worker(run) for _ in range(scenario.concurrency)]
    step = scenario.ramp_s / scenario.concurrency
    with trio.CancelScope() as deadline:
        if scenario.duration_s is not None:
            deadline.deadline = trio.current_time() + scenario.warmup_s + scenario.duration_s
        async with trio.open_nursery() as outer:
            outer.start_soon(_watchdog, workers, scenario.timeout_s)
            async with trio.open_nursery() as nursery:
                for i, worker in enumerate(workers):
                    nursery.start_soon(worker.run_until_done, i * step)
            outer.cancel_scope.cancel()
    result = run.result
    result.elapsed_s = max(run.last_finish - run.measure_from, 0.0)
    if scenario.duration_s is not None:
        # The deadline runs on Trio's clock, the measurements on perf_counter: clamp the jitter.
        result.elapsed_s = min(result.elapsed_s or scenario.duration_s, scenario.duration_s)
    return result
