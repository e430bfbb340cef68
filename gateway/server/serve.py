"""Serving: the HTTP server in front of the app (the built-in HTTP/1.1 server, or Hypercorn's
Trio worker), signals, graceful stop, workers.

Stop sequence on SIGINT/SIGTERM: stop accepting, let in-flight requests and streams finish for
up to `server.graceful_timeout_s` (streams still running shortly before it ends get an error
frame and `[DONE]`: server/stream_cutoff.py), cancel what is left, stop the actors (they flush),
close storage, exit 0. A second signal cancels at once.
"""

from __future__ import annotations

import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import trio
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.config import Config as HyperConfig
from hypercorn.config import Sockets
from hypercorn.trio.run import worker_serve

from gateway.app import create_app
from gateway.config import Config, ServerConfig
from gateway.operations.routes import ALONE, Worker
from gateway.runtime import Runtime, open_runtime
from gateway.server.asgi import ASGIApp
from gateway.server.http1 import Http1Server
from gateway.server.stream_cutoff import cut_streams_when_late
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


def reuseport_sockets(server: ServerConfig, workers: int, *, listen: bool = True) -> Sockets:
    """Sockets bound to the server's address with SO_REUSEPORT (Hypercorn sets it when there
    are several workers), so the kernel spreads new connections over every process listening
    there. Without `listen` they only hold the port: a socket bound but not listening takes
    no connection."""
    hc = hypercorn_config(server)
    hc.workers = workers
    sockets = hc.create_sockets()
    if listen:
        for sock in sockets.insecure_sockets:
            sock.listen(hc.backlog)
    return sockets


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
    """Run one instance until `shutdown_trigger` returns, then drain and stop. One of several
    workers binds its own SO_REUSEPORT socket once its runtime is open (server/workers.py)."""
    async with open_runtime(config) as runtime:
        app = create_app(runtime, extra_routes, worker)
        with _startup_frozen():
            await _serve(
                runtime, app, config.server, shutdown_trigger, sockets, worker, task_status
            )


@contextmanager
def _startup_frozen() -> Iterator[None]:
    """What exists once the instance is open lives as long as it does (modules, config,
    routes, actors, pools): moved out of the collector's reach (`gc.freeze`), so that its full
    collections walk only what requests make — they were 3-4 % of a request's CPU and its p99
    latency (docs/decisions.md, "The collector and the objects of start-up"). Given back
    (`gc.unfreeze`) when the instance stops: a process that runs several (the tests) must not
    keep each one's leftovers for good. (No `gc.collect()` first: it made each start of a
    gateway in the tests 0.1 s slower; start-up's own garbage is little, and freed at the
    stop.)"""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _serve(
    runtime: Runtime,
    app: ASGIApp,
    server: ServerConfig,
    shutdown_trigger: Callable[[], Awaitable[None]],
    sockets: Sockets | None,
    worker: Worker,
    task_status: trio.TaskStatus[Served],
) -> None:
    shutdown_trigger = partial(_then_draining, shutdown_trigger, runtime)
    if sockets is None and worker.count > 1:
        sockets = reuseport_sockets(server, worker.count)
    drain_began = trio.Event()

    async def trigger() -> None:
        await shutdown_trigger()
        drain_began.set()

    async with trio.open_nursery() as nursery:
        if server.http_server == "hypercorn":
            run = partial(
                worker_serve,
                ASGIWrapper(app),
                hypercorn_config(server),
                sockets=sockets,
                shutdown_trigger=trigger,
            )
        else:
            http1 = Http1Server(app, server)
            run = partial(http1.serve, await _listeners(server, sockets), trigger)

        async def serving(task_status: trio.TaskStatus[list[str]]) -> None:
            await run(task_status=task_status)
            nursery.cancel_scope.cancel()  # drained: no stream left to cut

        nursery.start_soon(
            cut_streams_when_late, drain_began, runtime.relays, server.graceful_timeout_s
        )
        urls = await nursery.start(serving)
        task_status.started(Served(urls, runtime))


async def _then_draining(trigger: Callable[[], Awaitable[None]], runtime: Runtime) -> None:
    """`trigger`, then mark the instance not ready (/readyz 503) for the drain."""
    await trigger()
    runtime.readiness.set("draining", "stopping; in-flight requests finish")


async def _listeners(server: ServerConfig, sockets: Sockets | None) -> list[trio.SocketListener]:
    """The workers' shared sockets, or new ones bound here."""
    if sockets is not None:
        return [
            trio.SocketListener(trio.socket.from_stdlib_socket(sock))
            for sock in sockets.insecure_sockets
        ]
    return await trio.open_tcp_listeners(server.port, host=server.host)


async def _watch_signals(
    stop: trio.Event,
    abort: trio.CancelScope,
    parent_says_stop: Callable[[], Awaitable[None]] | None,
) -> None:
    """First SIGINT/SIGTERM (or, for workers, the parent's word): drain. Second: cancel now."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            if parent_says_stop is not None:
                nursery.start_soon(_watch_parent, parent_says_stop, stop)
            async for signum in signals:
                if not stop.is_set():
                    log.info("received %s: draining", signal.Signals(signum).name)
                    stop.set()
                else:
                    log.warning("second signal: stopping now")
                    abort.cancel()


async def _watch_parent(parent_says_stop: Callable[[], Awaitable[None]], stop: trio.Event) -> None:
    await parent_says_stop()
    stop.set()


async def run_until_signalled(
    config: Config,
    *,
    sockets: Sockets | None = None,
    parent_says_stop: Callable[[], Awaitable[None]] | None = None,
    extra_routes: Sequence[Routes] = (),
    worker: Worker = ALONE,
    task_status: trio.TaskStatus[Served] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until a signal, drain, return. Must run in the main thread (signal handling)."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_signals, stop, nursery.cancel_scope, parent_says_stop)

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
    from gateway.server.workers import run_workers  # imports this module

    return run_workers(config, on_started)
