"""`completion.error` and `completion.success` events, made from each finished inference
request's context (a request middleware observer, gateway/web/middleware.py). A billed
request's event joins its charge, which waits in the accountant for the request's end: the
usage flush writes both in one transaction (actors/awaiting_charges.py). Other events (errors
not billed) go to the event writer (actors/event_writer.py). Both write in batches: no commit
per request.

Every error event carries what the hourly usage counts the failed request under (storage/
usage.py): written with its charge or its batch of events, never apart from them.

Only requests that were authenticated count (the org and key are known): an unauthenticated 401
has no org to tell. Every 4xx/5xx answer is an error event, a client that left before the
answer completed (499) included; successes are sampled at `[webhooks]
completion_success_sample_rate`. Error data carries our own APIError's type, code and message
(the one the client got), never an upstream's body or a credential (docs/webhooks.md).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from typing import Any

from actors.accountant import Accountant
from actors.event_writer import EventWriter
from gateway.inference.billing import provider_of
from gateway.web.context import RequestContext
from storage.events import NewEvent, new_event
from storage.usage import FailedRequest

COMPLETION_ERROR, COMPLETION_SUCCESS = "completion.error", "completion.success"
CLIENT_CLOSED = 499
_CLIENT_CLOSED_ERROR = (
    "client_error",
    "client_disconnected",
    "The client closed the connection before the response was complete.",
)


class CompletionEvents:
    def __init__(
        self,
        writer: EventWriter,
        routes: Collection[str],
        success_sample_rate: float,
        *,
        accountant: Accountant | None = None,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._writer = writer
        self._accountant = accountant  # holds billed requests' charges until they end
        self._routes = frozenset(routes)
        self._rate = success_sample_rate
        self._draw = draw  # uniform in [0, 1): rate 1.0 keeps every success, 0 none

    def finished(self, ctx: RequestContext, status: int, seconds: float) -> None:
        """The middleware's observer: at most one event for the request, never waiting. Every
        request's end releases its charge, if one awaits it, event or not."""
        event = self._event(ctx, status, seconds)
        if self._accountant is not None and self._accountant.request_ended(ctx.request_id, event):
            return  # written with its charge
        if event is not None:
            self._writer.offer(event)

    def _event(self, ctx: RequestContext, status: int, seconds: float) -> NewEvent | None:
        if ctx.route not in self._routes or ctx.org_id is None:
            return None
        if status >= 400:
            failed = FailedRequest(ctx.key_id, ctx.model, provider_of(ctx.deployment))
            data = error_data(ctx, status, seconds)
            return new_event(ctx.org_id, COMPLETION_ERROR, data, failed=failed)
        if self._rate > 0 and self._draw() < self._rate:
            return new_event(ctx.org_id, COMPLETION_SUCCESS, success_data(ctx, status, seconds))
        return None


def _common(ctx: RequestContext, status: int, seconds: float) -> dict[str, Any]:
    return {
        "request_id": ctx.request_id,
        "key_id": ctx.key_id,
        "model": ctx.model,
        "endpoint": ctx.route,
        "status": status,
        "latency_ms": round(seconds * 1000, 3),
    }


def error_data(ctx: RequestContext, status: int, seconds: float) -> dict[str, Any]:
    if ctx.error_type is not None:
        type, code, message = ctx.error_type, ctx.error_code, ctx.error_message
    elif status == CLIENT_CLOSED:
        type, code, message = _CLIENT_CLOSED_ERROR
    else:  # an error status answered without an APIError (none today): say only the status
        type = "server_error" if status >= 500 else "invalid_request_error"
        code, message = None, f"The request failed with status {status}."
    error = {"type": type, "code": code, "message": message}
    return {**_common(ctx, status, seconds), "error": error}


def success_data(ctx: RequestContext, status: int, seconds: float) -> dict[str, Any]:
    data = _common(ctx, status, seconds)
    data["stream"] = ctx.stream
    if ctx.prompt_tokens is not None and ctx.completion_tokens is not None:
        data["usage"] = {
            "prompt_tokens": ctx.prompt_tokens,
            "completion_tokens": ctx.completion_tokens,
            "total_tokens": ctx.prompt_tokens + ctx.completion_tokens,
        }
    if ctx.cost_usd is not None:
        data["cost_usd"] = ctx.cost_usd
    return data
