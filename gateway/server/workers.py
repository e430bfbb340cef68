"""`gateway serve --workers N`: the parent process, which starts N workers and supervises them.

- Sockets: each worker binds its own SO_REUSEPORT socket on the shared port once its runtime
  is open, and the parent holds none that listens (only a bound one that keeps the port). So a
  socket exists only while its worker lives: when a worker dies the kernel closes its socket
  and sends new connections to the others; nothing waits on a socket nobody accepts on.
- A worker that dies is restarted after a backoff (RESTART_BACKOFF_S, doubling per death in a
  row, at most RESTART_BACKOFF_MAX_S; a worker that served STABLE_S starts the count again),
  logged, and counted (`gateway_worker_restarts_total`, written by the new worker into the
  shared metrics). After MAX_RESTARTS_IN_A_ROW quick deaths of one worker, or a worker that
  dies before it ever served on the first start, the parent stops everything and exits 1:
  restarting will not fix that, and whatever runs the gateway should see it.
- Stopping: the workers run in their own process group (a terminal's Ctrl-C reaches only the
  parent). The first SIGINT/SIGTERM asks every worker to drain, by closing the parent's end of
  its control pipe (a worker also sees that when the parent dies). A second is passed on as
  SIGTERM (a worker's second signal: cancel now). Workers still running `graceful_timeout_s`
  + STOP_MARGIN_S after the first are killed. Exit status: 0 when every worker stopped
  cleanly, else 1.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from types import FrameType

import trio
from msgspec.structs import replace

from gateway.config import Config
from gateway.operations.metrics_shared import ENV as METRICS_ENV
from gateway.operations.metrics_shared import WORKER_ENV as METRICS_WORKER_ENV
from gateway.operations.metrics_shared import count_worker_start, mark_dead, prepare_directory
from gateway.operations.routes import Worker
from gateway.server.serve import reuseport_sockets, run_until_signalled

log = logging.getLogger("gateway.server")

RESTART_BACKOFF_S = 0.5
RESTART_BACKOFF_MAX_S = 30.0
STABLE_S = 60.0
MAX_RESTARTS_IN_A_ROW = 5
STOP_MARGIN_S = 10.0  # after the drain: the actors' final flush (5 s at most), closing storage


def worker_main(config: Config, worker: Worker, control: Connection, restarted: bool) -> None:
    """A worker process: serve until the parent says stop (or a signal); tell the parent on
    `control` once listening. The parent closing its end (asked to stop, or dead) means stop."""
    from gateway.logs import setup_logging

    os.setpgid(0, 0)  # signals come from the parent, not the terminal
    os.environ[METRICS_WORKER_ENV] = str(worker.index)  # its process figures' `worker` label
    setup_logging(config.log_level)
    count_worker_start(restarted=restarted, first=worker.index == 0 and not restarted)

    async def parent_says_stop() -> None:
        await trio.lowlevel.wait_readable(control.fileno())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(
                    run_until_signalled, config, parent_says_stop=parent_says_stop, worker=worker
                )
            )
            control.send(os.getpid())

    trio.run(main)


@dataclass
class _Slot:
    index: int
    process: SpawnProcess | None = None
    control: Connection | None = None  # the parent's end; closing it says "stop"
    serving: bool = False
    started_at: float = 0.0
    deaths_in_a_row: int = 0
    restart_at: float | None = None
    exit_codes: list[int] = field(default_factory=list)


class _Parent:
    def __init__(self, config: Config, metrics_dir: Path) -> None:
        self._config = config
        self._count = config.server.workers
        self._ctx: SpawnContext = multiprocessing.get_context("spawn")
        self._metrics_dir = metrics_dir
        self._slots = [_Slot(i) for i in range(self._count)]
        self._signals: list[int] = []
        self._stopping_since: float | None = None
        self._failed = False
        self._killed = False

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """Only records it: the wake-up fd interrupts the loop's wait."""
        self._signals.append(signum)

    def run(
        self, urls: list[str], on_started: Callable[[list[str]], None] | None, wake: socket.socket
    ) -> int:
        for slot in self._slots:
            self._start(slot, restarted=False)
        announced = False
        while True:
            now = time.monotonic()
            self._handle_signals(now)
            self._reap(now)
            self._restart_due(now)
            if not announced and all(s.serving for s in self._slots):
                announced = True
                if on_started is not None:
                    on_started(urls)
            if self._stopping_since is not None:
                if all(s.process is None for s in self._slots):
                    break
                if now >= self._stopping_since + self._stop_after() and not self._killed:
                    self._kill_remaining()
            self._wait(wake, now)
        last_codes = [s.exit_codes[-1] for s in self._slots if s.exit_codes]
        return 1 if self._failed or self._killed or any(last_codes) else 0

    def _stop_after(self) -> float:
        return self._config.server.graceful_timeout_s + STOP_MARGIN_S

    def _start(self, slot: _Slot, *, restarted: bool) -> None:
        # A pipe, not a multiprocessing.Event: a worker killed inside the Event's wait leaves
        # it locked, and `set()` then waits forever for that worker.
        ours, theirs = self._ctx.Pipe()
        process = self._ctx.Process(
            target=worker_main,
            args=(self._config, Worker(slot.index, self._count), theirs, restarted),
            daemon=False,
        )
        # prometheus_client reads it when imported: the workers inherit it from the parent.
        os.environ[METRICS_ENV] = str(self._metrics_dir)
        try:
            process.start()
        finally:
            os.environ.pop(METRICS_ENV, None)
            theirs.close()
        slot.process, slot.control, slot.serving = process, ours, False
        slot.started_at, slot.restart_at = time.monotonic(), None

    def _handle_signals(self, now: float) -> None:
        while self._signals:
            name = signal.Signals(self._signals.pop(0)).name
            if self._stopping_since is None:
                log.info("received %s: stopping the workers", name)
                self._begin_stop(now)
            else:
                log.warning("received %s again: the workers stop now", name)
                for slot in self._slots:
                    _signal(slot, signal.SIGTERM)

    def _begin_stop(self, now: float) -> None:
        if self._stopping_since is not None:
            return
        self._stopping_since = now
        for slot in self._slots:
            slot.restart_at = None
            _close_control(slot)

    def _reap(self, now: float) -> None:
        for slot in self._slots:
            if not slot.serving and slot.control is not None and slot.control.poll():
                try:
                    slot.control.recv()
                except EOFError:  # it died before it served: its sentinel says so
                    _close_control(slot)
                else:
                    slot.serving = True
                    if slot.exit_codes:
                        log.info("worker %d restarted: pid %s serving", slot.index, _pid(slot))
            process = slot.process
            if process is not None and process.exitcode is not None:
                self._died(slot, process, now)

    def _died(self, slot: _Slot, process: SpawnProcess, now: float) -> None:
        code = process.exitcode or 0
        slot.exit_codes.append(code)
        slot.process = None
        _close_control(slot)
        if process.pid is not None:
            mark_dead(process.pid, self._metrics_dir)
        if self._stopping_since is not None:
            return
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited {code}"
        if not slot.serving and len(slot.exit_codes) == 1:
            log.error(
                "worker %d (pid %s) %s before it served: stopping", slot.index, process.pid, how
            )
            self._fail(now)
            return
        ran_long = now - slot.started_at >= STABLE_S
        slot.deaths_in_a_row = 1 if ran_long else slot.deaths_in_a_row + 1
        if slot.deaths_in_a_row > MAX_RESTARTS_IN_A_ROW:
            log.error(
                "worker %d (pid %s) %s, %d times in a row within %.0f s each: stopping",
                slot.index,
                process.pid,
                how,
                slot.deaths_in_a_row,
                STABLE_S,
            )
            self._fail(now)
            return
        delay = min(RESTART_BACKOFF_S * 2 ** (slot.deaths_in_a_row - 1), RESTART_BACKOFF_MAX_S)
        log.warning(
            "worker %d (pid %s) %s: restarting it in %.1f s", slot.index, process.pid, how, delay
        )
        slot.restart_at = now + delay

    def _fail(self, now: float) -> None:
        self._failed = True
        self._begin_stop(now)

    def _restart_due(self, now: float) -> None:
        if self._stopping_since is not None:
            return
        for slot in self._slots:
            if slot.restart_at is not None and slot.restart_at <= now:
                self._start(slot, restarted=True)

    def _kill_remaining(self) -> None:
        self._killed = True
        for slot in self._slots:
            if slot.process is not None:
                log.error(
                    "worker %d (pid %s) still running %.0f s after the stop: killing it",
                    slot.index,
                    slot.process.pid,
                    self._stop_after(),
                )
                _signal(slot, signal.SIGKILL)

    def _wait(self, wake: socket.socket, now: float) -> None:
        deadlines = [s.restart_at for s in self._slots if s.restart_at is not None]
        if self._stopping_since is not None and not self._killed:
            deadlines.append(self._stopping_since + self._stop_after())
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        handles: list[socket.socket | Connection | int] = [wake]
        for slot in self._slots:
            if slot.process is not None:
                handles.append(slot.process.sentinel)
            if slot.control is not None and not slot.serving:
                handles.append(slot.control)
        if wake in wait(handles, timeout):
            try:
                while wake.recv(64):
                    pass
            except BlockingIOError:
                pass


def _pid(slot: _Slot) -> int | None:
    return None if slot.process is None else slot.process.pid


def _close_control(slot: _Slot) -> None:
    if slot.control is not None:
        slot.control.close()
        slot.control = None


def _signal(slot: _Slot, signum: int) -> None:
    pid = _pid(slot)
    if pid is None:
        return
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def run_workers(config: Config, on_started: Callable[[list[str]], None] | None) -> int:
    """Run `config.server.workers` workers on one port until a signal; the exit status."""
    count = config.server.workers
    hold = reuseport_sockets(config.server, count, listen=False)  # resolves port 0, keeps it
    host, port = hold.insecure_sockets[0].getsockname()[:2]
    config = replace(config, server=replace(config.server, port=port))
    # One /metrics for all workers (gateway/operations/metrics_shared.py).
    metrics_dir = (config.data_dir / "metrics").resolve()
    prepare_directory(metrics_dir)
    parent = _Parent(config, metrics_dir)
    wake, wake_in = socket.socketpair()
    wake.setblocking(False)
    wake_in.setblocking(False)
    previous_fd = signal.set_wakeup_fd(wake_in.fileno())
    previous = {s: signal.signal(s, parent.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return parent.run([f"http://{host}:{port}"], on_started, wake)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)
        wake.close()
        wake_in.close()
        for sock in hold.insecure_sockets:
            sock.close()
