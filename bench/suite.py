"""The standard bench suite: simulated upstream, gateway and load driver as separate processes.

The gateway is pinned to one CPU, the upstream and this process (the load driver) to another,
so the gateway's numbers are not flattered or hurt by the load it is given. Every child is
stopped (SIGTERM, then SIGKILL after 10 s) however the suite ends, and every step is bounded in
time. Everything listens on 127.0.0.1. This module orchestrates; load.py measures, report.py
renders.
"""

from __future__ import annotations

import io
import os
import secrets
import string
import sys
import tempfile
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import trio

from bench.load import Measured, Scenario, run_load
from bench.processes import (
    ROOT,
    START_TIMEOUT_S,
    Child,
    Gauge,
    SuiteError,
    child,
    free_port,
    make_dir,
    proc_status_kb,
    raise_fd_limit,
    write_file,
)
from bench.report import SLOW_STREAMS, Progress, Row

MODEL = "sim-small"


@dataclass(frozen=True)
class SuiteOptions:
    concurrency: tuple[int, ...] = (1, 8, 64)
    duration_s: float = 10.0
    slow_streams: int = 1000
    modes: tuple[str, ...] = ("json", "sse")
    warmup_s: float = 0.5
    slow_chunk_interval_ms: float = 1000.0
    completion_tokens: int = 20
    progress: bool = True
    workers: int = 2  # the scaling pass compares this many workers with one (below 2: skipped)
    billing: bool = True  # off: the gateway neither reserves nor writes usage rows


@dataclass(frozen=True)
class CpuPlan:
    gateway: int
    load: int  # the upstream and the load driver

    @classmethod
    def choose(cls) -> CpuPlan | None:
        """Two distinct CPUs of this process's affinity set, or None (with a warning)."""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            warnings.warn(
                "fewer than 2 CPUs available: processes are not pinned", RuntimeWarning, 2
            )
            return None
        return cls(gateway=cpus[0], load=cpus[1])


def gateway_config(
    upstream_base: str,
    *,
    max_connections: int,
    keepalive: int,
    billing: bool = True,
    success_sample_rate: float | None = None,
) -> str:
    """The bench gateway's config. `bench compare` gives it to earlier revisions too, which
    refuse unknown keys: add a key only when the revisions compared against know it (or, as
    `[webhooks]`, only when asked for: `success_sample_rate`, for `bench events`)."""
    webhooks = (
        ""
        if success_sample_rate is None
        else f"\n[webhooks]\ncompletion_success_sample_rate = {success_sample_rate}\n"
    )
    return (
        f"""\
[server]
access_log = false
graceful_timeout_s = 5

[billing]
enabled = {"true" if billing else "false"}

[[providers]]
name = "sim"
kind = "openai"
base_url = "{upstream_base}"
api_key = "sim-upstream-key"
max_connections = {max_connections}
max_keepalive_connections = {keepalive}

[[models]]
id = "{MODEL}"
provider = "sim"
upstream = "{MODEL}"
input_usd_per_mtok = 0.1
output_usd_per_mtok = 0.2
"""
        + webhooks
    )


@dataclass(frozen=True)
class GatewayCode:
    """Which gateway a stack runs: `python -m gateway` with `source` as the working directory,
    so `source`'s packages are imported (the working directory comes first on sys.path), with
    the dependencies `python` has."""

    python: str = sys.executable
    source: Path = ROOT


def gateway_env() -> dict[str, str]:
    """This process's environment without GATEWAY_* (the stack sets its own) nor
    PYTHONSAFEPATH (it would keep the working directory off sys.path)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.pop("PYTHONSAFEPATH", None)
    return env


async def imported_gateway(code: GatewayCode) -> Path:
    """The `gateway/__init__.py` that `code` imports, checked to be under `code.source` (a
    SuiteError otherwise: the stack would measure some other code). Bounded by the start limit."""
    argv = [code.python, "-c", "import gateway; print(gateway.__file__)"]
    try:
        with trio.fail_after(START_TIMEOUT_S):
            done = await trio.run_process(
                argv,
                cwd=str(code.source),
                env=gateway_env(),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    except (OSError, trio.TooSlowError) as exc:
        raise SuiteError(f"{code.python} could not import gateway: {exc!r}") from None
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace")[-2000:]
        raise SuiteError(f"{code.python} could not import gateway in {code.source}:\n{tail}")
    module = await trio.Path(done.stdout.decode().strip()).resolve()
    if not module.is_relative_to(await trio.Path(code.source).resolve()):
        raise SuiteError(f"{code.python} in {code.source} imports gateway from {module}")
    return Path(module)


@dataclass
class Stack:
    upstream: Child
    gateway: Child
    upstream_base: str
    gateway_key: str


async def _create_key(base: str, management_key: str, rpm: int | None = None) -> str:
    """A secret key for the load (with `rate_limit_rpm` if given), and best-effort credits for
    its org."""
    headers = {"Authorization": f"Bearer {management_key}"}
    body: dict[str, object] = {"name": "bench"}
    if rpm is not None:
        body["rate_limit_rpm"] = rpm
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10.0) as client:
        response = await client.post("/v1/keys", json=body)
        if response.status_code >= 400:
            raise SuiteError(f"POST /v1/keys: {response.status_code} {response.text[:300]}")
        key = response.json()["key"]
        # Requests are priced; a fresh org may have no credit. Not fatal if top-up is refused.
        await client.post(
            "/v1/credits/topup", json={"amount_usd": 1000.0, "payment_method_id": "pm_card_visa"}
        )
    return str(key)


@asynccontextmanager
async def stack(
    workdir: Path,
    cpus: CpuPlan | None,
    *,
    chunk_interval_ms: float | None,
    completion_tokens: int,
    max_connections: int,
    keepalive: int,
    workers: int = 1,
    billing: bool = True,
    success_sample_rate: float | None = None,
    code: GatewayCode = GatewayCode(),
    extra_toml: str | Callable[[str], str] = "",
    redis_url: str | None = None,
    key_rpm: int | None = None,
    upstream_args: tuple[str, ...] = (),
) -> AsyncIterator[Stack]:
    """Upstream + gateway (`workers` processes, running `code`) in `workdir`, ready, with a load
    key; both stopped on exit. The upstream is always this tree's (`upstream_args`: more of its
    command line, e.g. `--fault`). `extra_toml` (or extra_toml(upstream base URL)) is appended to
    the gateway's config (e.g. the audio bench's [[models]]). With `redis_url` the gateway runs
    in multi-instance mode (limits and holds in Redis); `key_rpm` gives the load key a rate
    limit, so every request is admitted by the rate limiter."""
    make_dir(workdir)
    upstream_argv = [sys.executable, "-m", "bench.upstream", "--port", str(free_port())]
    upstream_argv += ["--completion-tokens", str(completion_tokens), *upstream_args]
    if chunk_interval_ms is not None:
        upstream_argv += ["--chunk-interval-ms", str(chunk_interval_ms)]
    load_cpu = cpus.load if cpus else None
    gateway_cpu = cpus.gateway if cpus else None
    async with child(
        "upstream", upstream_argv, log=workdir / "upstream.log", cpu=load_cpu
    ) as upstream:
        upstream_base = upstream.url.rstrip("/")
        if not upstream_base.endswith("/v1"):
            upstream_base += "/v1"
        config = write_file(
            workdir / "gateway.toml",
            gateway_config(
                upstream_base,
                max_connections=max_connections,
                keepalive=keepalive,
                billing=billing,
                success_sample_rate=success_sample_rate,
            )
            + (extra_toml(upstream_base) if callable(extra_toml) else extra_toml),
        )
        alphabet = string.ascii_letters + string.digits
        management_key = "service_mgmt_bench-" + "".join(
            secrets.choice(alphabet) for _ in range(24)
        )
        env = gateway_env()
        env.update(
            GATEWAY_DATA_DIR=str(workdir),
            GATEWAY_DATABASE_URL=f"sqlite:///{workdir}/gw.db",
            GATEWAY_PORT=str(free_port()),
            GATEWAY_BOOTSTRAP_MANAGEMENT_KEY=management_key,
            GATEWAY_LOG_LEVEL="WARNING",
        )
        if redis_url is not None:
            env["GATEWAY_REDIS_URL"] = redis_url
        gateway_argv = [code.python, "-m", "gateway", "serve", "--config", str(config)]
        gateway_argv += ["--workers", str(workers)]
        async with child(
            "gateway",
            gateway_argv,
            log=workdir / "gateway.log",
            cpu=gateway_cpu,
            env=env,
            cwd=code.source,
        ) as gateway:
            with trio.fail_after(30):
                key = await _create_key(gateway.url.rstrip("/"), management_key, key_rpm)
            yield Stack(upstream, gateway, upstream_base, key)


async def measure(
    scenario: Scenario, *, gateway_pid: int | None = None, progress: bool = True
) -> Measured:
    """Run one scenario (with a progress line); with `gateway_pid`, also the gateway's peak
    RSS and CPU per request (its whole process tree)."""
    bar = Progress(
        f"{scenario.name:<8} {'sse' if scenario.stream else 'json':<4} c={scenario.concurrency:<5}",
        total=scenario.requests,
        duration_s=(scenario.duration_s or 0) + scenario.warmup_s,
        stream=None if progress else io.StringIO(),  # not a terminal: silent
    )
    gauge = Gauge(gateway_pid) if gateway_pid is not None else None
    try:
        async with trio.open_nursery() as nursery:
            if gauge is not None:
                nursery.start_soon(gauge.run, scenario.warmup_s)
            result = await run_load(scenario, on_progress=bar.update)
            nursery.cancel_scope.cancel()
    finally:
        bar.close()
    if gauge is None:
        return Measured(result)
    gauge.stop()
    done = result.completed + result.error_count
    per_request = gauge.cpu_s * 1e6 / done if gauge.cpu_s is not None and done else None
    return Measured(result, gauge.peak_kb / 1024, per_request)


async def run_suite(options: SuiteOptions) -> list[Row]:
    """The whole suite; returns the report rows. Bounded: every load run has a duration or a
    request count and a per-request timeout; starting and stopping processes have time limits."""
    raise_fd_limit()
    cpus = CpuPlan.choose()
    own_affinity = os.sched_getaffinity(0)
    if cpus is not None:
        os.sched_setaffinity(0, {cpus.load})
    rows: list[Row] = []
    top = max(options.concurrency, default=1)
    try:
        with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
            async with stack(
                Path(tmp) / "matrix",
                cpus,
                chunk_interval_ms=None,
                completion_tokens=options.completion_tokens,
                max_connections=top + 64,
                keepalive=top + 64,
                billing=options.billing,
            ) as s:
                for mode in options.modes:
                    for concurrency in options.concurrency:
                        rows += await _pair(s, options, mode == "sse", concurrency)
            if options.slow_streams > 0:
                rows.append(await _slow_streams(Path(tmp) / "slow", cpus, options))
            if options.workers >= 2:
                os.sched_setaffinity(0, own_affinity)
                rows += await _workers_scaling(Path(tmp) / "scaling", options)
    finally:
        os.sched_setaffinity(0, own_affinity)
    return rows


async def _pair(s: Stack, options: SuiteOptions, stream: bool, concurrency: int) -> list[Row]:
    """Direct to the upstream, then through the gateway, at one mode and concurrency."""
    direct_sc = Scenario(
        "direct",
        s.upstream_base,
        "sim-upstream-key",
        MODEL,
        stream,
        concurrency,
        duration_s=options.duration_s,
        warmup_s=options.warmup_s,
        max_tokens=options.completion_tokens,
    )
    gateway_sc = replace(
        direct_sc,
        name="gateway",
        base_url=s.gateway.url.rstrip("/") + "/v1",
        api_key=s.gateway_key,
    )
    direct = await measure(direct_sc, progress=options.progress)
    gateway = await measure(
        gateway_sc, gateway_pid=s.gateway.process.pid, progress=options.progress
    )
    return [Row.from_result(direct.result), Row.from_measured(gateway, direct=direct.result)]


async def _slow_streams(workdir: Path, cpus: CpuPlan | None, options: SuiteOptions) -> Row:
    """N concurrent slow SSE streams through a fresh gateway; peak RSS is its VmHWM."""
    n = options.slow_streams
    stream_s = options.completion_tokens * options.slow_chunk_interval_ms / 1000
    async with stack(
        workdir,
        cpus,
        chunk_interval_ms=options.slow_chunk_interval_ms,
        completion_tokens=options.completion_tokens,
        max_connections=n + 64,
        keepalive=n + 64,
    ) as s:
        scenario = Scenario(
            SLOW_STREAMS,
            s.gateway.url.rstrip("/") + "/v1",
            s.gateway_key,
            MODEL,
            stream=True,
            concurrency=n,
            requests=n,
            warmup_s=0.0,
            max_tokens=options.completion_tokens,
            ramp_s=min(n / 500, 5.0),  # spare the listen backlog a thousand SYNs at once
            timeout_s=stream_s + 30.0,
        )
        pid = s.gateway.process.pid
        measured = await measure(scenario, gateway_pid=pid, progress=options.progress)
        hwm_kb = proc_status_kb(pid, "VmHWM")
        measured.peak_rss_mb = max(measured.peak_rss_mb or 0.0, (hwm_kb or 0) / 1024) or None
    return Row.from_measured(measured)


def workers_scenario(workers: int) -> str:
    return f"workers-{workers}"


async def _workers_scaling(workdir: Path, options: SuiteOptions) -> list[Row]:
    """One gateway worker, then `options.workers`, at the top concurrency, nothing pinned: every
    process (upstream and load driver included) shares every CPU, as in production."""
    top = max(options.concurrency, default=1)
    rows = []
    for workers in (1, options.workers):
        async with stack(
            workdir / str(workers),
            None,
            chunk_interval_ms=None,
            completion_tokens=options.completion_tokens,
            max_connections=top + 64,
            keepalive=top + 64,
            workers=workers,
        ) as s:
            for mode in options.modes:
                scenario = Scenario(
                    workers_scenario(workers),
                    s.gateway.url.rstrip("/") + "/v1",
                    s.gateway_key,
                    MODEL,
                    mode == "sse",
                    top,
                    duration_s=options.duration_s,
                    warmup_s=options.warmup_s,
                    max_tokens=options.completion_tokens,
                )
                pid = s.gateway.process.pid
                measured = await measure(scenario, gateway_pid=pid, progress=options.progress)
                rows.append(Row.from_measured(measured))
    return rows
