"""`gateway bench failover`: a model of two deployments, one of them failing on command.

The simulated upstream serves both deployments (`sim/sim-small` and `broken/sim-broken`: one
process, two providers of the gateway's config) and fails the second's requests as `--fault`
says (bench/upstream/fault_spec.py: `error_rate=1` by default, every request a 500). The model
splits traffic 1:1 (`weighted`), so half the requests first try the failing deployment until
its breaker trips; the report says what share of requests succeeded and their latency, JSON and
SSE. With a fault that breaks streams after their first byte (`reset_after_frames=5`), it
measures what a client sees of a stream that broke mid-way.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.load import Scenario
from bench.processes import SuiteError
from bench.report import Row
from bench.suite import CpuPlan, SuiteOptions, measure, stack

MODEL = "sim-ha"
BROKEN = "sim-broken"
DEFAULT_FAULT = "error_rate=1"


def failover_toml(upstream_base: str) -> str:
    return f"""
[[providers]]
name = "broken"
kind = "openai"
base_url = "{upstream_base}"
api_key = "sim-upstream-key"

[[models]]
id = "{MODEL}"
strategy = "weighted"
input_usd_per_mtok = 0.1
output_usd_per_mtok = 0.2

[[models.deployments]]
provider = "sim"
upstream = "sim-small"

[[models.deployments]]
provider = "broken"
upstream = "{BROKEN}"
"""


@dataclass(frozen=True)
class Outcome:
    mode: str
    requests: int
    succeeded: int
    p99_ms: float

    def line(self, fault: str) -> str:
        share = 100.0 * self.succeeded / self.requests if self.requests else float("nan")
        return (
            f"failover {self.mode}: {share:.2f} % of {self.requests} requests succeeded, p99"
            f" {self.p99_ms:.1f} ms, with one of two deployments failing ({fault})"
        )


async def run_failover(options: SuiteOptions, fault: str) -> tuple[list[Row], list[Outcome]]:
    cpus = CpuPlan.choose()
    own_affinity = os.sched_getaffinity(0)
    if cpus is not None:
        os.sched_setaffinity(0, {cpus.load})
    concurrency = max(options.concurrency)
    rows: list[Row] = []
    outcomes: list[Outcome] = []
    try:
        with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
            async with stack(
                Path(tmp),
                cpus,
                chunk_interval_ms=None,
                completion_tokens=options.completion_tokens,
                max_connections=concurrency + 64,
                keepalive=concurrency + 64,
                billing=options.billing,
                extra_toml=failover_toml,
                upstream_args=("--fault", f"{BROKEN}:{fault}"),
            ) as s:
                for mode in options.modes:
                    scenario = Scenario(
                        "failover",
                        s.gateway.url.rstrip("/") + "/v1",
                        s.gateway_key,
                        MODEL,
                        mode == "sse",
                        concurrency,
                        duration_s=options.duration_s,
                        warmup_s=options.warmup_s,
                    )
                    measured = await measure(
                        scenario, gateway_pid=s.gateway.process.pid, progress=options.progress
                    )
                    row = Row.from_measured(measured)
                    rows.append(row)
                    total = row.completed + row.errors
                    outcomes.append(Outcome(mode, total, row.completed, row.p99_ms))
    except OSError as exc:
        raise SuiteError(f"failover bench: {exc}") from exc
    finally:
        os.sched_setaffinity(0, own_affinity)
    return rows, outcomes
