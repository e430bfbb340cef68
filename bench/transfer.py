"""What the transfer benches (`files`, `audio`) share: one gateway started as `bench suite`
starts it (bench/suite.py `stack`, billing on, pinned to its own CPU), a client holding its load
key, and a gauge of the gateway's memory."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import trio

from bench.processes import SuiteError, cpu_seconds, proc_status_kb, process_tree, raise_fd_limit
from bench.suite import CpuPlan, stack


class RssGauge:
    """VmRSS of a process tree, sampled every `interval_s` while `run` runs: peak and count."""

    def __init__(self, pid: int, interval_s: float) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_kb = 0
        self.samples = 0

    def now_kb(self) -> int:
        return sum(proc_status_kb(p, "VmRSS") or 0 for p in process_tree(self.pid))

    async def settled_kb(self) -> int:
        """The RSS a moment after a transfer (the response's last buffers released)."""
        await trio.sleep(0.2)
        return self.now_kb()

    def cpu_s(self) -> float:
        return cpu_seconds(process_tree(self.pid))

    def reset(self) -> None:
        self.peak_kb = self.now_kb()
        self.samples = 0

    async def run(self) -> None:
        while True:
            self.peak_kb = max(self.peak_kb, self.now_kb())
            self.samples += 1
            await trio.sleep(self.interval_s)


@dataclass(frozen=True)
class TransferGateway:
    client: httpx.AsyncClient  # base URL and load key set
    gauge: RssGauge
    workdir: Path  # the bench's scratch directory (removed on exit)


@asynccontextmanager
async def transfer_gateway(
    name: str, sample_interval_s: float, *, extra_toml: str = ""
) -> AsyncIterator[TransferGateway]:
    """A gateway and the simulated upstream, stopped on exit. The client runs on the load CPU
    (this process's affinity is restored on exit); an HTTP failure or a timeout is a
    SuiteError naming the bench."""
    raise_fd_limit()
    cpus = CpuPlan.choose()
    own_affinity = os.sched_getaffinity(0)
    if cpus is not None:
        os.sched_setaffinity(0, {cpus.load})
    try:
        with tempfile.TemporaryDirectory(prefix=f"gateway-bench-{name}-") as tmp:
            workdir = Path(tmp) / name
            async with stack(
                workdir,
                cpus,
                chunk_interval_ms=None,
                completion_tokens=1,
                max_connections=8,
                keepalive=8,
                extra_toml=extra_toml,
            ) as s:
                headers = {"Authorization": f"Bearer {s.gateway_key}"}
                async with httpx.AsyncClient(
                    base_url=s.gateway.url.rstrip("/"), headers=headers, timeout=60.0
                ) as client:
                    gauge = RssGauge(s.gateway.process.pid, sample_interval_s)
                    yield TransferGateway(client, gauge, workdir)
    except (httpx.HTTPError, trio.TooSlowError) as exc:
        raise SuiteError(f"{name} bench failed: {exc!r}") from None
    finally:
        os.sched_setaffinity(0, own_affinity)
