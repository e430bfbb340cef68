"""Assemble the ASGI application of one instance from its runtime."""

from __future__ import annotations

from collections.abc import Sequence

from quart_trio import QuartTrio

from gateway import errors
from gateway.inference import app as inference
from gateway.inference.deps import InferenceDeps
from gateway.middleware import ASGIApp, RequestMiddleware
from gateway.routes import credits, keys, operations, provider_keys
from gateway.routing import Operation, Routes
from gateway.runtime import Runtime


def create_app(runtime: Runtime, extra: Sequence[Routes] = ()) -> ASGIApp:
    """The app wrapped in the request middleware. `extra` lets tests mount routes of their own."""
    app = QuartTrio("gateway")
    server = runtime.config.server
    # Quart's defaults cut long SSE streams after 60 s and buffer up to 16 MiB per body.
    app.config["RESPONSE_TIMEOUT"] = None
    app.config["BODY_TIMEOUT"] = 60
    app.config["MAX_CONTENT_LENGTH"] = server.max_request_body_bytes
    errors.install(app)

    registered: list[Routes] = []

    def all_operations() -> list[Operation]:
        return [*inference.OPERATIONS, *(op for r in registered for op in r.operations)]

    registered += [
        keys.routes(runtime.storage, runtime.auth, runtime.hasher, runtime.accountant),
        provider_keys.routes(
            runtime.storage, runtime.auth, runtime.provider_keys, runtime.upstreams
        ),
        credits.routes(runtime.storage, runtime.auth, runtime.accountant, runtime.payments),
        operations.routes(
            runtime.storage.db, runtime.supervisor, runtime.auth, runtime.metrics, all_operations
        ),
        *extra,
    ]
    for r in registered:
        app.register_blueprint(r.blueprint)
    deps = InferenceDeps(
        auth=runtime.auth,
        registry=runtime.registry,
        upstreams=runtime.upstreams,
        relays=runtime.relays,
        limiter=runtime.limiter,
        idempotency=runtime.storage.idempotency,
        max_body_bytes=server.max_request_body_bytes,
        sse_keepalive_s=server.sse_keepalive_s,
        accountant=runtime.accountant if runtime.config.billing.enabled else None,
        provider_keys=runtime.provider_keys,
    )
    hot_path = inference.InferenceApp(app, deps)
    return RequestMiddleware(hot_path, runtime.metrics, log_requests=server.access_log)
