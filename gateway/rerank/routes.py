"""The rerank route's declaration (OpenAPI included); the work is in route.py."""

from __future__ import annotations

from gateway.inference.deps import InferenceDeps
from gateway.rerank.route import Rerank
from gateway.web import Operation, Routes
from gateway.web.errors import UPSTREAM_STATUSES
from protocol.rerank.ranking import RerankResponse
from protocol.rerank.request import RerankRequest
from protocol.scopes import RERANK

RERANK_PATH = "/v1/rerank"


def routes(deps: InferenceDeps) -> Routes:
    r = Routes()
    r.add(
        Operation(
            "POST",
            RERANK_PATH,
            "Rerank documents against a query (sorted by relevance_score, highest first)",
            "Inference",
            request=RerankRequest,
            response=RerankResponse,
            scope=RERANK,
            # 400 (not 404) for an unknown model: the API's rerank error table
            errors=(*UPSTREAM_STATUSES, 402, 403),
        ),
        Rerank(deps),
    )
    return r
