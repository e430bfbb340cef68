"""Operational routes: /healthz, /metrics, /v1/admin/actors, /openapi.json.

`/v1/admin/actors` is instance-wide (every organization's actors, queues and errors): only the
operator key opens it (`Auth.OPERATOR`). Each worker process of `gateway serve --workers N`
supervises its own actors, so the answer is the tree of the worker that answered, saying which
one it is (`pid`, `worker` of `workers`, `hostname`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from actors.supervisor import ActorSnapshot, Supervisor
from gateway.keyring.watch import KeyringWatch, master_key_rotated
from gateway.operations.metrics import Metrics
from gateway.web import Auth, Operation, Request, Response, Routes, json_response
from gateway.web.openapi import document
from protocol.errors import APIError
from storage.database import Database

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


def routes(
    db: Database,
    supervisor: Supervisor,
    metrics: Metrics,
    all_operations: Callable[[], Sequence[Operation]],
    worker: Worker = ALONE,
    keyring: KeyringWatch | None = None,
) -> Routes:
    r = Routes()
    hostname = socket.gethostname()

    @r.operation(
        Operation(
            "GET",
            "/healthz",
            "200 when the database answers and all actors run",
            "Operations",
            response=HealthStatus,
            auth=Auth.NONE,
            errors=(503,),
        )
    )
    async def healthz(request: Request) -> Response:
        problems: list[str] = []
        try:
            await db.fetchval("SELECT 1")
        except Exception:  # any failure of the probe means "not healthy", never a 500
            problems.append("database unreachable")
        if not supervisor.all_running():
            problems.append("an actor is not running")
        headers = None
        if keyring is not None and keyring.retired:  # until restarted with the new key
            rotated = master_key_rotated(keyring.reason or "")
            problems.append(rotated.message)
            headers = [(k.lower().encode(), v.encode()) for k, v in rotated.headers.items()]
        if problems:
            error = APIError(503, "; ".join(problems), type="server_error", code="unhealthy")
            return Response(error.body(), status=503, headers=headers)
        return Response(_OK)

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
