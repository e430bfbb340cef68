"""Operational routes: /healthz, /metrics, /v1/admin/actors, /openapi.json."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from actors.supervisor import ActorSnapshot, Supervisor
from gateway.operations.metrics import Metrics
from gateway.web import Auth, Operation, Request, Response, Routes, json_response
from gateway.web.openapi import document
from protocol.errors import APIError
from storage.database import Database

PROMETHEUS_TEXT = b"text/plain; version=0.0.4"


class HealthStatus(msgspec.Struct):
    status: str  # "ok"


_OK = msgspec.json.encode(HealthStatus("ok"))


def routes(
    db: Database,
    supervisor: Supervisor,
    metrics: Metrics,
    all_operations: Callable[[], Sequence[Operation]],
) -> Routes:
    r = Routes()

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
        if problems:
            error = APIError(503, "; ".join(problems), type="server_error", code="unhealthy")
            return Response(error.body(), status=503)
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
            "The live supervision tree (management key)",
            "Operations",
            response=ActorSnapshot,
            auth=Auth.MANAGEMENT,
            errors=(401, 403),
        )
    )
    async def actors(request: Request) -> Response:
        return json_response(supervisor.snapshot())

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
