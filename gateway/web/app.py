"""The ASGI app every API area is served by: route ▸ auth ▸ scopes ▸ handler ▸ response, with
the one error mapping (gateway/web/errors.py) around all of it.

Per HTTP request it does one router lookup, at most one authentication (cached) and creates one
`Request`; nothing else is allocated or awaited before the handler runs. WebSocket connections
are dispatched by path to their handler with the raw ASGI channels; an unknown path is closed
with 4404 before it is accepted (the server answers that handshake with 403). The ASGI lifespan
protocol is acknowledged (Hypercorn sends it).

A secret key's `rate_limit_rpm` is applied here, once per request, right after the scope check
and before the handler (gateway/web/rate_limit.py): every route it may call counts.

With tracing on (`ctx.trace`), authentication and the rate limit are the `auth` and
`admission` spans of the request (gateway/telemetry/).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import get_args
from urllib.parse import quote

from actors.ratelimit import RateLimiter
from gateway.auth.operator import OperatorKeys
from gateway.config.schema import ServerConfig
from gateway.server.asgi import Receive, Scope, Send
from gateway.web.context import RequestContext, context_of
from gateway.web.errors import answer
from gateway.web.rate_limit import admit
from gateway.web.request import Request
from gateway.web.routing import Auth, BodyLimit, Route, Router, WebSocketRoute
from protocol.credentials import CredentialKind
from protocol.errors import forbidden
from services.auth import Authenticator

WEBSOCKET_NOT_FOUND = 4404
_SERVER = ServerConfig()  # one place for each default: the config's


@dataclass(frozen=True)
class BodyLimits:
    """Bytes, per `BodyLimit` kind (from `[server]`, whose defaults are these)."""

    json: int = _SERVER.max_request_body_bytes
    audio: int = _SERVER.max_audio_body_bytes
    file: int = _SERVER.max_file_body_bytes
    vision: int = _SERVER.max_vision_body_bytes

    def of(self, kind: BodyLimit) -> int:
        return int(getattr(self, kind))


class WebApp:
    def __init__(
        self,
        routes: Iterable[Route | WebSocketRoute],
        auth: Authenticator | None,
        limits: BodyLimits = BodyLimits(),
        operator: OperatorKeys | None = None,
        *,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.router = Router(routes)
        self._auth = auth
        self._operator = operator or OperatorKeys(())  # none: operator routes are disabled
        self._limiter = limiter
        self._limits = {kind: limits.of(kind) for kind in get_args(BodyLimit)}
        if auth is None and any(op.auth is not Auth.NONE for op in self.router.operations):
            raise ValueError("routes that need a credential need an Authenticator")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        ctx = context_of(scope)
        if ctx is None:  # served without the middleware (unit tests)
            ctx = RequestContext("req_unknown", method, scope["path"], time.perf_counter())
        request: Request | None = None
        try:
            route, params = self.router.match(method, raw_path(scope))
            op = route.operation
            ctx.route = op.path
            request = Request(scope, receive, send, ctx, op, params, self._limits[op.body_limit])
            if op.auth is Auth.OPERATOR:
                assert self._auth is not None
                fingerprint = await self._operator.authenticate(
                    request.header(b"authorization"), self._auth
                )
                ctx.key_id = f"operator:{fingerprint}"
            elif op.auth is not Auth.NONE:
                assert self._auth is not None
                trace = ctx.trace
                if trace is None:
                    principal = await self._auth.authenticate(request.header(b"authorization"))
                else:
                    with trace.step("auth"):
                        principal = await self._auth.authenticate(request.header(b"authorization"))
                ctx.org_id = principal.org_id
                ctx.key_id = principal.key_id
                request.principal = principal
                if op.auth is Auth.MANAGEMENT and principal.kind is not CredentialKind.MANAGEMENT:
                    raise forbidden("This route needs a management key.")
                if op.scope is not None:
                    principal.require_scope(op.scope)
                if self._limiter is not None:
                    if trace is None:
                        await admit(self._limiter, principal, request.headers)
                    else:
                        with trace.step("admission", **{"gateway.admission": "rate_limit"}):
                            await admit(self._limiter, principal, request.headers)
            response = await route.handler(request)
            if response is not None:
                request.started = True
                await response.send(send, request.headers)
        except Exception as exc:
            if request is None:
                await answer(
                    send, exc, method=method, route="unmatched", started=False, headers=[], ctx=ctx
                )
            else:
                await answer(
                    send,
                    exc,
                    method=method,
                    route=request.operation.path,
                    started=request.started,
                    headers=request.headers,
                    ctx=ctx,
                )

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.router.websocket(raw_path(scope))
        if handler is not None:
            await handler(scope, receive, send)
            return
        message = await receive()  # websocket.connect
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.close", "code": WEBSOCKET_NOT_FOUND})


def raw_path(scope: Scope) -> bytes:
    """The path as the client sent it (no query): both servers give `raw_path`; a server
    that does not (ASGI makes it optional) gets the decoded path quoted back."""
    raw = scope.get("raw_path")
    if raw is None:
        raw = quote(scope["path"], safe="/:@!$&'()*+,;=~").encode()
    return bytes(raw)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
