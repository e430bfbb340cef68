"""The rerank route's declaration (OpenAPI included); the work is in route.py."""

from __future__ import annotations

from gateway.inference.deps import InferenceDeps
from gateway.rerank.route import Rerank
from gateway.web import Operation, Routes
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
            errors=(400, 401, 402, 403, 404, 413, 429, 502, 504),
        ),
        Rerank(deps),
    )
    return r
