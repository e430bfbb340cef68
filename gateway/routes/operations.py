"""Operational routes: /healthz, /metrics, /v1/admin/actors, /openapi.json."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from quart import Blueprint, Response

from actors.supervisor import Supervisor
from gateway.auth import Authenticator
from gateway.http import authenticate, json_response, note_route
from gateway.metrics import Metrics
from gateway.openapi import document
from gateway.routing import Operation, Routes
from protocol.credentials import CredentialKind
from protocol.errors import APIError, forbidden
from storage.database import Database


def routes(
    db: Database,
    supervisor: Supervisor,
    auth: Authenticator,
    metrics: Metrics,
    all_operations: Callable[[], Sequence[Operation]],
) -> Routes:
    r = Routes(Blueprint("operations", __name__))

    @r.operation(
        Operation(
            "GET",
            "/healthz",
            "200 when the database answers and all actors run",
            "Operations",
            auth=None,
            errors=(503,),
        )
    )
    async def healthz() -> Response:
        note_route()
        problems: list[str] = []
        try:
            await db.fetchval("SELECT 1")
        except Exception:  # any failure of the probe means "not healthy", never a 500
            problems.append("database unreachable")
        if not supervisor.all_running():
            problems.append("an actor is not running")
        if problems:
            error = APIError(503, "; ".join(problems), type="server_error", code="unhealthy")
            return Response(error.body(), status=503, content_type="application/json")
        return json_response({"status": "ok"})

    @r.operation(
        Operation(
            "GET",
            "/metrics",
            "Prometheus metrics (text exposition format)",
            "Operations",
            auth=None,
            response_content_type="text/plain",
        )
    )
    async def prometheus() -> Response:
        note_route()
        return Response(metrics.render(), content_type="text/plain; version=0.0.4")

    @r.operation(
        Operation(
            "GET",
            "/v1/admin/actors",
            "The live supervision tree (management key)",
            "Operations",
            errors=(401, 403),
        )
    )
    async def actors() -> Response:
        principal = await authenticate(auth)
        if principal.kind is not CredentialKind.MANAGEMENT:
            raise forbidden("The actor tree needs a management key.")
        return json_response(supervisor.snapshot().to_json())

    @r.operation(Operation("GET", "/openapi.json", "This document", "Operations", auth=None))
    async def openapi() -> Response:
        note_route()
        return json_response(document(all_operations()))

    return r
