"""Per-request facts gathered along the way, for the access log, metrics and the response.

The ASGI middleware (gateway/web/middleware.py) creates one per HTTP request and puts it in the
scope; routes fill in what they learn (route, org, key, model, cost), and the error mapping
(gateway/web/errors.py) the error answered, for the `completion.error` event. A request that
calls a provider with the organization's own key (bring-your-own-key) says so here (`own_key`),
so that the error mapping can tell the provider refusing that key from any other failure.
With tracing on, `trace` holds the request's spans; each step that makes a span checks it for
None first (gateway/telemetry/).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # imports the OpenTelemetry SDK: only when tracing is on
    from gateway.telemetry.tracing import RequestTrace

SCOPE_KEY = "gateway.request"


class InvalidKeyReporter(Protocol):
    async def report_invalid(
        self,
        org_id: str,
        provider: str,
        *,
        status: int | None = None,
        started: float | None = None,
    ) -> bool:
        """Record that `provider` refused the org's key on a request that began at `started`
        (`RequestContext.started`; services/provider_keys.py)."""
        ...


@dataclass(frozen=True, slots=True)
class OwnKey:
    """The request calls `provider` with `org_id`'s own key; `reporter` records a refusal."""

    org_id: str
    provider: str
    reporter: InvalidKeyReporter


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
    first_byte_at: float | None = None  # time.perf_counter() when the response's head went out
    response_complete: bool = False
    # Logged (access log, metrics, events) instead of the status sent: 503 for a stream the
    # server ended because it was shutting down (its head had said 200).
    logged_status: int | None = None
    stream: bool = False  # an SSE answer was asked for
    error_type: str | None = None  # the APIError answered (or mapped, once the response began)
    error_code: str | None = None
    error_message: str | None = None
    own_key: OwnKey | None = None  # set by admission when the org's own provider key is used
    deployment: str | None = None  # `<provider>/<upstream>` that answered (inference)
    attempts: int | None = None  # upstream attempts made (inference)
    # The request's spans when tracing is on (gateway/telemetry/); None: tracing is off.
    trace: RequestTrace | None = None

    def note_error(self, type: str, code: str | None, message: str) -> None:
        self.error_type = type
        self.error_code = code
        self.error_message = message


def context_of(scope: Mapping[str, object]) -> RequestContext | None:
    ctx = scope.get(SCOPE_KEY)
    return ctx if isinstance(ctx, RequestContext) else None
