"""Two gateways loaded at the same time: `bench billing` (billing on against off), `bench
events` (every success an event against none), `bench guardrails` (a PII guardrail against
no plugin) and `bench compare` (this tree against an earlier revision).

Each side is a stack of its own (this tree's simulated upstream and a gateway); both gateways
are pinned to the same CPU and loaded at once, so this machine's speed drift hits both alike
(runs taken one after the other here differ by up to 2x). Two rounds, each side started and
loaded first once. This module orchestrates; suite.py starts processes, report.py compares.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

import trio

from bench.load import Measured, Scenario
from bench.otlp_sink import OtlpSink, serve_otlp_sink
from bench.processes import SuiteError, raise_fd_limit
from bench.report import Row
from bench.revision import Revision
from bench.suite import (
    MODEL,
    CpuPlan,
    GatewayCode,
    Stack,
    SuiteOptions,
    imported_gateway,
    measure,
    stack,
)

BILLING_ON, BILLING_OFF = "billing-on", "billing-off"
BASE, HEAD = "base", "head"
EVENTS_ALL, EVENTS_NONE = "events-all", "events-none"
GUARDRAILS_ON, GUARDRAILS_OFF = "pii-guardrail", "no-plugins"
TRACING_ON, TRACING_OFF = "tracing-on", "tracing-off"
# A PII guardrail on every model, on the request and on the answer (JSON and streamed).
PII_GUARDRAIL = """
[[guardrails]]
name = "pii"
kind = "pii"
stages = ["input", "output"]
action = "block"
"""


@dataclass(frozen=True)
class Side:
    """One of the two gateways: its rows' scenario name and how to start it."""

    name: str
    code: GatewayCode = field(default_factory=GatewayCode)
    billing: bool = True
    success_sample_rate: float | None = None  # [webhooks] completion_success_sample_rate
    redis_url: str | None = None  # multi-instance mode
    key_rpm: int | None = None  # the load key's rate_limit_rpm
    extra_toml: str = ""  # appended to the gateway's config (e.g. guardrails)


async def compare_sides(sides: tuple[Side, Side], options: SuiteOptions) -> list[Row]:
    """Both sides loaded at once at the top concurrency, each mode in turn, in two rounds with
    each side first once; rows named after the sides, round by round (report.side_by_side).
    Checks first that each side's gateway imports its own code (a SuiteError otherwise).
    Cancelling it stops every process it started (each stack stops its own)."""
    if sides[0].name == sides[1].name:
        raise SuiteError(f"both sides are named {sides[0].name!r}")
    for side in sides:
        await imported_gateway(side.code)
    raise_fd_limit()
    cpus = CpuPlan.choose()
    own_affinity = os.sched_getaffinity(0)
    if cpus is not None:
        os.sched_setaffinity(0, {cpus.load})
    top = max(options.concurrency, default=1)
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:

            def side_stack(index: int, side: Side) -> AbstractAsyncContextManager[Stack]:
                return stack(
                    Path(tmp) / f"round-{index}" / side.name,
                    cpus,
                    chunk_interval_ms=None,
                    completion_tokens=options.completion_tokens,
                    max_connections=top + 64,
                    keepalive=top + 64,
                    billing=side.billing,
                    success_sample_rate=side.success_sample_rate,
                    code=side.code,
                    redis_url=side.redis_url,
                    key_rpm=side.key_rpm,
                    extra_toml=side.extra_toml,
                )

            # Two rounds, each stack started and loaded first once: with identical work on
            # both, the method favoured one side by ~4 % (docs/performance.md).
            for index, (a, b) in enumerate([sides, sides[::-1]]):
                async with side_stack(index, a) as first, side_stack(index, b) as second:
                    for mode in options.modes:
                        rows += await _at_once(
                            [(a.name, first), (b.name, second)], options, mode == "sse", top
                        )
    finally:
        os.sched_setaffinity(0, own_affinity)
    return rows


async def compare_billing(options: SuiteOptions) -> list[Row]:
    """Billing on against billing off, this tree's gateway on both sides (`bench billing`;
    report.billing_overhead)."""
    return await compare_sides(
        (Side(BILLING_ON, billing=True), Side(BILLING_OFF, billing=False)), options
    )


async def compare_events(options: SuiteOptions) -> list[Row]:
    """`completion.success` for every request (sample rate 1.0) against none (0), this tree's
    gateway with billing on both sides (`bench events`; report.events_overhead). Errors are
    events on both sides alike; the bench's requests succeed, so this is the cost of writing an
    event per request (batched by the event writer)."""
    return await compare_sides(
        (
            Side(EVENTS_ALL, success_sample_rate=1.0),
            Side(EVENTS_NONE, success_sample_rate=0.0),
        ),
        options,
    )


async def compare_guardrails(options: SuiteOptions) -> list[Row]:
    """A PII guardrail on input and output against no plugin at all, this tree's gateway on
    both sides (`bench guardrails`; report.guardrails_overhead): what the guardrail costs a
    request, its stream held back and checked chunk by chunk."""
    return await compare_sides(
        (Side(GUARDRAILS_ON, extra_toml=PII_GUARDRAIL), Side(GUARDRAILS_OFF)), options
    )


async def compare_tracing(
    options: SuiteOptions, sample_ratio: float = 1.0
) -> tuple[list[Row], str]:
    """OpenTelemetry tracing on (`sample_ratio` of the requests sampled, exported to a local
    stand-in collector, bench/otlp_sink.py) against off, this tree's gateway on both sides
    (`bench tracing`; report.tracing_overhead); and a line saying what the collector got."""
    async with trio.open_nursery() as nursery:
        sink: OtlpSink = await nursery.start(serve_otlp_sink)
        toml = f'''
[telemetry]
otlp_endpoint = "{sink.url}"
sample_ratio = {sample_ratio}
'''
        rows = await compare_sides((Side(TRACING_ON, extra_toml=toml), Side(TRACING_OFF)), options)
        nursery.cancel_scope.cancel()
    line = f"collector: {sink.requests} exports, {sink.bytes / 1e6:.1f} MB of spans\n"
    return rows, line


async def compare_revision(base: Revision, options: SuiteOptions) -> list[Row]:
    """`base`'s gateway against this tree's, billing on for both (`bench compare`;
    report.head_against_base)."""
    return await compare_sides((Side(BASE, base.code), Side(HEAD)), options)


async def _at_once(
    stacks: list[tuple[str, Stack]], options: SuiteOptions, stream: bool, concurrency: int
) -> list[Row]:
    measured: dict[str, Measured] = {}

    async def one(name: str, s: Stack) -> None:
        scenario = Scenario(
            name,
            s.gateway.url.rstrip("/") + "/v1",
            s.gateway_key,
            MODEL,
            stream,
            concurrency,
            duration_s=options.duration_s,
            warmup_s=options.warmup_s,
            max_tokens=options.completion_tokens,
        )
        measured[name] = await measure(
            scenario, gateway_pid=s.gateway.process.pid, progress=options.progress
        )

    async with trio.open_nursery() as nursery:
        for name, s in stacks:
            nursery.start_soon(one, name, s)
    return [Row.from_measured(measured[name]) for name, _ in stacks]
