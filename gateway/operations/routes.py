"""Operational routes: /livez, /readyz (= /healthz), /metrics, /v1/admin/actors, /openapi.json.

`/livez` and `/readyz` do no I/O (readiness.py says what each means): they answer at once,
whatever the database or Redis do.

`/v1/admin/actors` is instance-wide (every organization's actors, queues and errors): only the
operator key opens it (`Auth.OPERATOR`). Each worker process of `gateway serve --workers N`
supervises its own actors, so the answer is the tree of the worker that answered, saying which
one it is (`pid`, `worker` of `workers`, `hostname`). Beside the tree, `services`: the numbers
of the parts that are not actors (they run no task of their own), e.g. `upstreams`, each
provider's connection pool (requests, connections in use and idle).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from actors.supervisor import ActorSnapshot, Supervisor
from gateway.operations.metrics import Metrics
from gateway.operations.readiness import Readiness
from gateway.web import Auth, Operation, Request, Response, Routes, json_response
from gateway.web.openapi import document
from protocol.errors import APIError

PROMETHEUS_TEXT = b"text/plain; version=0.0.4"


class HealthStatus(msgspec.Struct):
    status: str  # "ok"


_OK = msgspec.json.encode(HealthStatus("ok"))


@dataclass(frozen=True)
class Worker:
    """Which of `gateway serve --workers N`'s processes this is (0-based; 0 of 1 alone)."""

    index: int = 0
    count: int = 1


ALONE = Worker()  # one process: no --workers


@dataclass(frozen=True, kw_only=True)
class ActorTree(ActorSnapshot):
    """The supervision tree of the process that answered: the root supervisor's node, and
    which process that is."""

    pid: int
    worker: int  # 0 to workers - 1
    workers: int
    hostname: str
    services: dict[str, dict[str, object]]  # not actors: e.g. "upstreams", per provider


def _unavailable(code: str, message: str) -> APIError:
    return APIError(503, message, type="server_error", code=code, headers={"Retry-After": "1"})


def routes(
    readiness: Readiness,
    supervisor: Supervisor,
    metrics: Metrics,
    all_operations: Callable[[], Sequence[Operation]],
    worker: Worker = ALONE,
    services: Mapping[str, Callable[[], dict[str, object]]] | None = None,
) -> Routes:
    """`services`: by name, the statistics of a part that is not an actor, shown beside the
    actor tree (e.g. "upstreams": `Upstreams.statistics`)."""
    r = Routes()
    hostname = socket.gethostname()

    @r.operation(
        Operation(
            "GET",
            "/livez",
            "200 while the process and its supervisors run (restart the process on 503)",
            "Operations",
            response=HealthStatus,
            auth=Auth.NONE,
            errors=(503,),
        )
    )
    async def livez(request: Request) -> Response:
        if readiness.live():
            return Response(_OK)
        raise _unavailable("not_live", "a supervisor of this process is not running")

    async def ready(request: Request) -> Response:
        reasons = readiness.reasons()
        if not reasons:
            return Response(_OK)
        raise _unavailable("not_ready", "not ready: " + "; ".join(reasons))

    for path, summary in (
        ("/readyz", "200 while this instance can serve inference (send it traffic)"),
        ("/healthz", "The same as /readyz"),
    ):
        health = Operation(
            "GET", path, summary, "Operations", response=HealthStatus, auth=Auth.NONE, errors=(503,)
        )
        r.add(health, ready)

    @r.operation(
        Operation(
            "GET",
            "/metrics",
            "Prometheus metrics (text exposition format)",
            "Operations",
            response=str,
            response_content_type="text/plain",
            auth=Auth.NONE,
        )
    )
    async def prometheus(request: Request) -> Response:
        return Response(metrics.render().encode(), content_type=PROMETHEUS_TEXT)

    @r.operation(
        Operation(
            "GET",
            "/v1/admin/actors",
            "The live supervision tree of the worker that answered (operator key)",
            "Operations",
            response=ActorTree,
            auth=Auth.OPERATOR,
            errors=(401, 403),
        )
    )
    async def actors(request: Request) -> Response:
        root = supervisor.snapshot()
        return json_response(
            ActorTree(
                **vars(root),
                pid=os.getpid(),
                worker=worker.index,
                workers=worker.count,
                hostname=hostname,
                services={name: stats() for name, stats in (services or {}).items()},
            )
        )

    @r.operation(
        Operation(
            "GET",
            "/openapi.json",
            "This document",
            "Operations",
            response=dict[str, Any],
            auth=Auth.NONE,
        )
    )
    async def openapi(request: Request) -> Response:
        return json_response(document(all_operations()))

    return r
