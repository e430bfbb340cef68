"""Serving: the HTTP server in front of the app (the built-in HTTP/1.1 server, or Hypercorn's
Trio worker), signals, graceful stop, workers.

Stop sequence on SIGINT/SIGTERM: stop accepting, let in-flight requests and streams finish for
up to `server.graceful_timeout_s`, cancel what is left, stop the actors (they flush), close
storage, exit 0. A second signal cancels at once.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.synchronize import Event as ProcessEvent

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config as HyperConfig
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve

from gateway.app import create_app
from gateway.config import Config, ServerConfig
from gateway.operations.metrics_shared import ENV as METRICS_ENV
from gateway.operations.metrics_shared import mark_dead, prepare_directory
from gateway.operations.routes import ALONE, Worker
from gateway.runtime import Runtime, open_runtime
from gateway.server.http1 import Http1Server
from gateway.web import Routes

log = logging.getLogger("gateway.server")


def hypercorn_config(server: ServerConfig) -> HyperConfig:
    hc = HyperConfig()
    hc.bind = [f"{server.host}:{server.port}"]
    hc.graceful_timeout = server.graceful_timeout_s
    hc.keep_alive_timeout = server.keep_alive_timeout_s
    # Hypercorn closes a keep-alive connection after 1000 requests by default.
    hc.keep_alive_max_requests = server.keep_alive_max_requests
    hc.accesslog = None  # our middleware writes one JSON line per request
    hc.errorlog = logging.getLogger("hypercorn.error")
    hc.include_server_header = False
    # h11 applies it only to a head still incomplete, and counts no headers (operations.md).
    hc.h11_max_incomplete_size = server.max_head_bytes
    return hc


@dataclass(frozen=True)
class Served:
    urls: list[str]
    runtime: Runtime


async def serve_instance(
    config: Config,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]],
    sockets: Sockets | None = None,
    extra_routes: Sequence[Routes] = (),
    worker: Worker = ALONE,
    task_status: trio.TaskStatus[Served] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one instance until `shutdown_trigger` returns, then drain and stop."""
    server = config.server
    async with open_runtime(config) as runtime:
        app = create_app(runtime, extra_routes, worker)
        async with trio.open_nursery() as nursery:
            if server.http_server == "hypercorn":
                run = partial(
                    worker_serve,
                    ASGIWrapper(app),
                    hypercorn_config(server),
                    sockets=sockets,
                    shutdown_trigger=shutdown_trigger,
                )
            else:
                http1 = Http1Server(app, server)
                run = partial(http1.serve, await _listeners(server, sockets), shutdown_trigger)
            urls = await nursery.start(run)
            task_status.started(Served(urls, runtime))


async def _listeners(server: ServerConfig, sockets: Sockets | None) -> list[trio.SocketListener]:
    """The workers' shared sockets, or new ones bound here."""
    if sockets is not None:
        return [
            trio.SocketListener(trio.socket.from_stdlib_socket(sock))
            for sock in sockets.insecure_sockets
        ]
    return await trio.open_tcp_listeners(server.port, host=server.host)


async def _watch_signals(
    stop: trio.Event, abort: trio.CancelScope, process_event: ProcessEvent | None
) -> None:
    """First SIGINT/SIGTERM (or the parent's event, for workers): drain. Second: cancel now."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            if process_event is not None:
                nursery.start_soon(_watch_process_event, process_event, stop)
            async for signum in signals:
                if not stop.is_set():
                    log.info("received %s: draining", signal.Signals(signum).name)
                    stop.set()
                else:
                    log.warning("second signal: stopping now")
                    abort.cancel()


async def _watch_process_event(event: ProcessEvent, stop: trio.Event) -> None:
    # A multiprocessing.Event cannot wake Trio directly: wait for it on a worker thread.
    await trio.to_thread.run_sync(event.wait, abandon_on_cancel=True)
    stop.set()


async def run_until_signalled(
    config: Config,
    *,
    sockets: Sockets | None = None,
    process_event: ProcessEvent | None = None,
    extra_routes: Sequence[Routes] = (),
    worker: Worker = ALONE,
    task_status: trio.TaskStatus[Served] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until a signal, drain, return. Must run in the main thread (signal handling)."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_signals, stop, nursery.cancel_scope, process_event)

        async def serve_then_stop(task_status: trio.TaskStatus[Served]) -> None:
            await serve_instance(
                config,
                shutdown_trigger=stop.wait,
                sockets=sockets,
                extra_routes=extra_routes,
                worker=worker,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()  # drained: stop watching signals

        served = await nursery.start(serve_then_stop)
        task_status.started(served)


def _worker_main(
    config: Config, sockets: Sockets, process_event: ProcessEvent, worker: Worker
) -> None:
    from gateway.logs import setup_logging

    setup_logging(config.log_level)
    trio.run(
        partial(
            run_until_signalled,
            config,
            sockets=sockets,
            process_event=process_event,
            worker=worker,
        )
    )


def serve(config: Config, *, on_started: Callable[[list[str]], None] | None = None) -> int:
    """Run `config.server.workers` instances on shared sockets; returns the exit status."""
    if config.server.workers == 1:

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                served = await nursery.start(run_until_signalled, config)
                if on_started is not None:
                    on_started(served.urls)

        trio.run(main)
        return 0
    return _serve_workers(config, on_started)


def _worker_sockets(config: Config) -> list[Sockets]:
    """One listening socket per worker, all bound to the same port with SO_REUSEPORT, so the
    kernel spreads new connections evenly over the workers. (With one shared socket, whichever
    worker wakes first takes a whole burst of connections: 46 against 18 of a bench's 64
    keep-alive connections, which then stay where they landed.)"""
    hc = hypercorn_config(config.server)
    hc.workers = config.server.workers  # Hypercorn sets SO_REUSEPORT when there are several
    first = hc.create_sockets()
    # Port 0 was resolved by the first bind; the others join that port.
    hc.bind = [_address(sock) for sock in first.insecure_sockets]
    every = [first] + [hc.create_sockets() for _ in range(config.server.workers - 1)]
    for sockets in every:
        for sock in sockets.insecure_sockets:
            sock.listen(hc.backlog)
    return every


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _serve_workers(config: Config, on_started: Callable[[list[str]], None] | None) -> int:
    every = _worker_sockets(config)
    ctx = multiprocessing.get_context("spawn")
    process_event = ctx.Event()
    processes = [
        ctx.Process(
            target=_worker_main,
            args=(config, sockets, process_event, Worker(index, len(every))),
            daemon=False,
        )
        for index, sockets in enumerate(every)
    ]
    # One /metrics for all workers (gateway/operations/metrics_shared.py). prometheus_client
    # reads the variable when imported, so the workers must inherit it: set only while they
    # start.
    metrics_dir = (config.data_dir / "metrics").resolve()
    prepare_directory(metrics_dir)
    os.environ[METRICS_ENV] = str(metrics_dir)
    try:
        for process in processes:
            process.start()
    finally:
        os.environ.pop(METRICS_ENV, None)
    if on_started is not None:
        on_started(
            [f"http://{s.getsockname()[0]}:{s.getsockname()[1]}" for s in every[0].insecure_sockets]
        )

    def forward(signum: int, _frame: object) -> None:
        process_event.set()

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    for process in processes:
        process.join()
        if process.pid is not None:
            mark_dead(process.pid, metrics_dir)
    for sockets in every:
        for sock in sockets.insecure_sockets:
            sock.close()
    return max((p.exitcode or 0) for p in processes)
