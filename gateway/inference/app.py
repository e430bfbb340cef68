"""The hot path as a bare ASGI app in front of the Quart app (Quart costs about a quarter more
per request): chat completions, embeddings, models. Every other request falls through."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from gateway.asgi import ClientDisconnected, send_error
from gateway.inference.call import Call
from gateway.inference.chat import ChatCompletions
from gateway.inference.deps import InferenceDeps
from gateway.inference.embeddings import Embeddings
from gateway.inference.models import Models
from gateway.middleware import ASGIApp, Receive, Scope, Send
from gateway.request_context import RequestContext, context_of
from gateway.routing import Operation
from protocol.errors import APIError, server_error

log = logging.getLogger("gateway.inference")
Handler = Callable[[Call], Awaitable[None]]
MODELS_PREFIX = "/v1/models/"

OPERATIONS = [
    Operation(
        "POST",
        "/v1/chat/completions",
        "Chat completion, JSON or SSE (`stream: true`)",
        "Inference",
        scope="chat:completions",
        errors=(400, 401, 402, 403, 404, 413, 429, 502, 504),
    ),
    Operation(
        "POST",
        "/v1/embeddings",
        "Embeddings",
        "Inference",
        scope="embeddings",
        errors=(400, 401, 402, 403, 404, 413, 429, 502, 504),
    ),
    Operation(
        "GET",
        "/v1/models",
        "Models this key may use",
        "Inference",
        scope="models:read",
        errors=(401, 403),
    ),
    Operation(
        "GET",
        "/v1/models/<path:model_id>",
        "One model",
        "Inference",
        scope="models:read",
        errors=(401, 403, 404),
    ),
]


class InferenceApp:
    def __init__(self, fallback: ASGIApp, deps: InferenceDeps) -> None:
        self._fallback = fallback
        chat = ChatCompletions(deps)
        embeddings = Embeddings(deps)
        self._models = Models(deps)
        self._routes: dict[str, dict[str, Handler]] = {
            "/v1/chat/completions": {"POST": chat},
            "/v1/embeddings": {"POST": embeddings},
            "/v1/models": {"GET": self._models.list},
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            methods = self._routes.get(path)
            if methods is not None:
                await self._handle(methods, path, scope, receive, send)
                return
            if path.startswith(MODELS_PREFIX) and len(path) > len(MODELS_PREFIX):
                model_id = path[len(MODELS_PREFIX) :]

                async def retrieve(call: Call) -> None:
                    await self._models.retrieve(call, model_id)

                await self._handle({"GET": retrieve}, "/v1/models/{id}", scope, receive, send)
                return
        await self._fallback(scope, receive, send)

    async def _handle(
        self, methods: dict[str, Handler], route: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        ctx = context_of(scope) or RequestContext("req_unknown", scope["method"], route, 0.0)
        ctx.route = route
        call = Call(scope, receive, send, ctx)
        handler = methods.get(scope["method"])
        try:
            if handler is None:
                allowed = ", ".join(methods)
                raise APIError(
                    405,
                    f"Method {scope['method']} is not allowed on {route}.",
                    type="invalid_request_error",
                    code="method_not_allowed",
                    headers={"Allow": allowed},
                )
            await handler(call)
        except APIError as error:
            if not call.started:
                await send_error(send, error, call.headers)
        except ClientDisconnected:
            return
        except Exception:
            log.exception("unhandled error on %s %s", scope["method"], route)
            if not call.started:
                await send_error(send, server_error())
