"""The bench's child processes: starting one pinned to a CPU with its log, waiting for its
"listening on" line, stopping it (SIGTERM, then SIGKILL), and reading its CPU time and memory
from /proc. bench/suite.py orchestrates them."""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import trio

ROOT = Path(__file__).resolve().parent.parent
_READY = re.compile(r"listening on (https?://\S+)")
START_TIMEOUT_S = 60.0
_STOP_GRACE_S = 10.0


class SuiteError(Exception):
    """A piece of the suite failed to start or to answer (the message says which and why)."""


def raise_fd_limit() -> None:
    """Thousands of streams need thousands of descriptors: lift the soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_status_kb(pid: int, field: str) -> int | None:
    """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM), or None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_tree(pid: int) -> list[int]:
    """`pid` and its live descendants (a gateway with workers is a parent and its children)."""
    pids, i = [pid], 0
    while i < len(pids):
        try:
            for task in os.listdir(f"/proc/{pids[i]}/task"):
                with open(f"/proc/{pids[i]}/task/{task}/children") as fh:
                    pids += [int(child) for child in fh.read().split()]
        except OSError:
            pass
        i += 1
    return pids


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time the processes have used so far (unreadable ones count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        except (OSError, ValueError, IndexError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


class Gauge:
    """Peak VmRSS (summed over the process tree) sampled while `run` runs, and the CPU the
    tree used in the measured window (after the warmup)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kb = 0
        self.cpu_s: float | None = None

    def sample(self) -> None:
        kb = sum(proc_status_kb(p, "VmRSS") or 0 for p in process_tree(self.pid))
        if kb > self.peak_kb:
            self.peak_kb = kb

    async def run(self, warmup_s: float, interval_s: float = 0.1) -> None:
        """Sample until cancelled; CPU counts from `warmup_s` on (see `stop`)."""
        deadline = trio.current_time() + warmup_s
        self._cpu_start: float | None = None
        while True:
            self.sample()
            if self._cpu_start is None and trio.current_time() >= deadline:
                self._cpu_start = cpu_seconds(process_tree(self.pid))
            await trio.sleep(interval_s)

    def stop(self) -> None:
        self.sample()
        start = getattr(self, "_cpu_start", None)
        if start is not None:
            self.cpu_s = cpu_seconds(process_tree(self.pid)) - start


@dataclass
class Child:
    name: str
    process: trio.Process
    url: str
    log: Path


def _preexec(cpu: int | None) -> Callable[[], None]:
    def setup() -> None:
        raise_fd_limit()
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    return setup


async def _wait_ready(name: str, process: trio.Process, log: Path) -> str:
    """The URL from the child's `... listening on URL` line; polls its log file."""
    with trio.move_on_after(START_TIMEOUT_S):
        while True:
            text = await trio.Path(log).read_text(errors="replace")
            match = _READY.search(text)
            if match:
                return match.group(1)
            if process.returncode is not None:
                raise SuiteError(f"{name} exited with {process.returncode}:\n{text[-2000:]}")
            await trio.sleep(0.05)
    raise SuiteError(f"{name} did not report ready within {START_TIMEOUT_S:.0f} s (see {log})")


async def _stop(process: trio.Process) -> None:
    """SIGTERM, then SIGKILL after the grace period; always waits for the exit."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(_STOP_GRACE_S):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


def _open_log(path: Path) -> BinaryIO:
    return open(path, "wb")


def make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def write_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@asynccontextmanager
async def child(
    name: str,
    argv: list[str],
    *,
    log: Path,
    cpu: int | None,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> AsyncIterator[Child]:
    """Start `argv` in `cwd` (output to `log`), wait for its ready line, stop it on exit."""
    out = _open_log(log)
    try:
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(cwd),
            env=env,
            preexec_fn=_preexec(cpu),
        )
    finally:
        out.close()  # the child holds its own copy
    try:
        url = await _wait_ready(name, process, log)
        yield Child(name, process, url, log)
    finally:
        await _stop(process)
