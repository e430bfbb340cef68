"""The outermost ASGI layer: request id, access log line and metrics for every HTTP request.

The request id is also set for every log line written while the request is served
(gateway/logs.py `REQUEST_ID`).

It sees every request, including unknown routes, errors and client disconnects, because it
wraps the whole app. A request whose response never completed (the client went away first)
is logged with status 499 (code `client_disconnected`); a route may set the status to log
instead of the one sent (`logged_status`: a stream cut by shutdown is 503). Nothing here reads
headers or bodies: no secret can reach the log. Observers (`on_finish`) see each finished
request's context, final status and duration: that is where `completion.*` events are made
(gateway/inference/completion_events.py).

With tracing on (`tracing`, gateway/telemetry/) each request gets its server span here, child
of the client's `traceparent` (the only header read, and only then), ended once the response
ended (a stream's with its last byte), and its ids go on the request's log lines. Off, this
costs one None check per request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gateway.logs import REQUEST_ID, TRACE_IDS, AccessLine, redact
from gateway.operations.metrics import Metrics
from gateway.server.asgi import ASGIApp, Message, Receive, Scope, Send
from gateway.web.context import SCOPE_KEY, RequestContext
from protocol.ids import new_id

if TYPE_CHECKING:  # the SDK: imported only when tracing is on
    from gateway.telemetry.tracing import Tracing

access_log = logging.getLogger("gateway.access")
CLIENT_CLOSED = 499
CLIENT_CLOSED_CODE = "client_disconnected"
REQUEST_ID_HEADER = b"x-request-id"
# Called once per finished HTTP request with its context, final status and seconds taken;
# must not block (it runs in the request's task, after the response).
FinishObserver = Callable[[RequestContext, int, float], None]


class RequestMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        *,
        log_requests: bool = True,
        on_finish: Sequence[FinishObserver] = (),
        tracing: Tracing | None = None,
    ) -> None:
        self.app = app
        self._tracing = tracing
        self._metrics = metrics
        self._log_requests = log_requests
        self._on_finish = tuple(on_finish)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ctx = RequestContext(
            request_id=new_id("req"),
            method=scope["method"],
            path=scope["path"],
            started=time.perf_counter(),
        )
        scope[SCOPE_KEY] = ctx
        request_id = ctx.request_id.encode()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                ctx.status = message["status"]
                ctx.first_byte_at = time.perf_counter()
                message["headers"] = [*message.get("headers", ()), (REQUEST_ID_HEADER, request_id)]
                await send(message)
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                await send(message)
                ctx.response_complete = True  # written: a write that met a reset did not complete
            else:
                await send(message)

        token = REQUEST_ID.set(ctx.request_id)  # on every log line while it is served
        if self._tracing is None:
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                self._finish(ctx)
                REQUEST_ID.reset(token)
            return
        trace = ctx.trace = self._tracing.begin(scope, ctx)
        ids = TRACE_IDS.set(trace.ids)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            trace.finish(ctx, self._finish(ctx))
            TRACE_IDS.reset(ids)
            REQUEST_ID.reset(token)

    def _finish(self, ctx: RequestContext) -> int:
        """Metrics, observers and the access line; the status logged."""
        seconds = time.perf_counter() - ctx.started
        status = ctx.status if ctx.response_complete and ctx.status else CLIENT_CLOSED
        if ctx.logged_status is not None:
            status = ctx.logged_status
        route = ctx.route or "unmatched"
        self._metrics.observe_request(ctx, route, status, seconds)
        for observer in self._on_finish:
            try:
                observer(ctx, status, seconds)
            except Exception:  # a bug in one must not fail the (answered) request
                access_log.exception("a request observer failed on %s", route)
        if self._log_requests and access_log.isEnabledFor(logging.INFO):
            fields: dict[str, object] = {
                "request_id": ctx.request_id,
                "method": ctx.method,
                "route": route,
                "path": redact(ctx.path),
                "status": status,
                "code": _code(ctx, status),
                "latency_ms": round(seconds * 1000, 3),
                "org_id": ctx.org_id,
                "key_id": ctx.key_id,
                "model": ctx.model,
                "deployment": ctx.deployment,
                "attempts": ctx.attempts,
                "prompt_tokens": ctx.prompt_tokens,
                "completion_tokens": ctx.completion_tokens,
                "cost_usd": ctx.cost_usd,
            }
            access_log.info(AccessLine(fields, f"{ctx.method} {route} {status}"))
        return status


def _code(ctx: RequestContext, status: int) -> str | None:
    """The error code a request ended with (what the client was answered), or null."""
    if status < 400:
        return None
    if ctx.error_code is None and status == CLIENT_CLOSED:
        return CLIENT_CLOSED_CODE
    return ctx.error_code
