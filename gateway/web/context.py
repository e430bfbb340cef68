"""Per-request facts gathered along the way, for the access log, metrics and the response.

The ASGI middleware (gateway/web/middleware.py) creates one per HTTP request and puts it in the
scope; routes fill in what they learn (route, org, key, model, cost).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SCOPE_KEY = "gateway.request"


@dataclass(slots=True)
class RequestContext:
    request_id: str
    method: str
    path: str
    started: float
    route: str | None = None
    org_id: str | None = None
    key_id: str | None = None
    model: str | None = None
    cost_usd: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    status: int | None = None
    response_complete: bool = False


def context_of(scope: Mapping[str, object]) -> RequestContext | None:
    ctx = scope.get(SCOPE_KEY)
    return ctx if isinstance(ctx, RequestContext) else None
