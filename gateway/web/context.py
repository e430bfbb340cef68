"""Per-request facts gathered along the way, for the access log, metrics and the response.

The ASGI middleware (gateway/web/middleware.py) creates one per HTTP request and puts it in the
scope; routes fill in what they learn (route, org, key, model, cost), and the error mapping
(gateway/web/errors.py) the error answered, for the `completion.error` event.
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
    # Logged (access log, metrics, events) instead of the status sent: 503 for a stream the
    # server ended because it was shutting down (its head had said 200).
    logged_status: int | None = None
    stream: bool = False  # an SSE answer was asked for
    error_type: str | None = None  # the APIError answered (or mapped, once the response began)
    error_code: str | None = None
    error_message: str | None = None

    def note_error(self, type: str, code: str | None, message: str) -> None:
        self.error_type = type
        self.error_code = code
        self.error_message = message


def context_of(scope: Mapping[str, object]) -> RequestContext | None:
    ctx = scope.get(SCOPE_KEY)
    return ctx if isinstance(ctx, RequestContext) else None
