"""GET /v1/admin/mirrors: per (model, shadow), how the shadow compares with the primary over
the retained results (docs/mirroring.md). Instance-wide (every organization's mirrored
requests), so only the operator key opens it, as every `/v1/admin/*` route; the figures are
read from the database, so every instance answers the same."""

from __future__ import annotations

from gateway.web import Auth, Operation, Request, Response, Routes, json_response
from protocol.mirror_api import MirrorComparison
from protocol.timefmt import to_iso
from services.mirror import compare
from storage.mirror_results import MirrorResultRepository

MIRRORS_PATH = "/v1/admin/mirrors"


def routes(repo: MirrorResultRepository) -> Routes:
    r = Routes()

    @r.operation(
        Operation(
            "GET",
            MIRRORS_PATH,
            "Mirrored traffic: each shadow model compared with its primary (operator key)",
            "Operations",
            response=MirrorComparison,
            auth=Auth.OPERATOR,
            errors=(400, 401, 403),
            query=(("since", "string", "ISO 8601; only shadow calls at or after it"),),
        )
    )
    async def mirrors(request: Request) -> Response:
        since = request.query_time("since")
        rows = await repo.figures(since_us=since)
        return json_response(MirrorComparison(since=to_iso(since), pairs=compare(rows)))

    return r
