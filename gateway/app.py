"""Assemble the ASGI application of one instance from its runtime: every API area's routes in
one request layer (gateway/web/), wrapped in the request middleware."""

from __future__ import annotations

from collections.abc import Sequence

from gateway import audio
from gateway.auth.operator import OperatorKeys
from gateway.config import ServerConfig
from gateway.credits import routes as credits
from gateway.files import routes as files
from gateway.files.form import FORM_OVERHEAD_BYTES
from gateway.fine_tuning import FineTuningDeps
from gateway.fine_tuning import routes as fine_tuning
from gateway.images import ImagesDeps
from gateway.images import routes as images
from gateway.inference import routes as inference
from gateway.inference.completion_events import CompletionEvents
from gateway.inference.deps import InferenceDeps
from gateway.keys import routes as keys
from gateway.operations import routes as operations
from gateway.operations.routes import ALONE, Worker
from gateway.provider_keys import routes as provider_keys
from gateway.rerank import routes as rerank
from gateway.responses import routes as responses
from gateway.responses.deps import ResponsesDeps
from gateway.runtime import Runtime
from gateway.server.asgi import ASGIApp
from gateway.web import BodyLimits, Operation, Routes, WebApp
from gateway.web.middleware import RequestMiddleware
from gateway.webhooks import routes as webhooks
from protocol.secretbox import WEBHOOK_SECRETS
from services.keyring import WatchedBox


def body_limits(server: ServerConfig) -> BodyLimits:
    """The request layer's caps. A file route's body is its form: the file (whose own limit the
    upload enforces, gateway/files/) plus at most FORM_OVERHEAD_BYTES around it."""
    return BodyLimits(
        json=server.max_request_body_bytes,
        audio=server.max_audio_body_bytes + audio.FORM_OVERHEAD_BYTES,
        file=server.max_file_body_bytes + FORM_OVERHEAD_BYTES,
        vision=server.max_vision_body_bytes + FORM_OVERHEAD_BYTES,
    )


def fine_tuning_deps(runtime: Runtime) -> FineTuningDeps:
    watcher = runtime.fine_tuning
    return FineTuningDeps(
        jobs=runtime.storage.fine_tuning,
        files=runtime.files,
        registry=runtime.registry,
        accountant=runtime.accountant,
        billing=runtime.config.billing.enabled,
        provider_keys=runtime.provider_keys,
        wake_watcher=watcher.wake,
        clock=watcher.clock,
        balance_changed=watcher.deps.balance_changed,
        config=runtime.config.fine_tuning,
        sse_keepalive_s=runtime.config.server.sse_keepalive_s,
    )


def create_app(runtime: Runtime, extra: Sequence[Routes] = (), worker: Worker = ALONE) -> ASGIApp:
    """The app wrapped in the request middleware. `extra` lets tests mount routes of their own;
    `worker` says which of `--workers N` processes this is (`/v1/admin/actors` shows it)."""
    server = runtime.config.server
    deps = InferenceDeps(
        registry=runtime.registry,
        upstreams=runtime.upstreams,
        relays=runtime.relays,
        idempotency=runtime.storage.idempotency,
        sse_keepalive_s=server.sse_keepalive_s,
        accountant=runtime.accountant if runtime.config.billing.enabled else None,
        provider_keys=runtime.provider_keys,
        fine_tuned_models=runtime.storage.fine_tuned_models,
    )
    app: WebApp | None = None

    def all_operations() -> list[Operation]:
        assert app is not None
        return app.router.operations

    areas = [
        inference.routes(deps),  # first: the hot path's static paths are dict lookups anyway
        rerank.routes(deps),
        audio.routes(deps, server.max_audio_body_bytes),
        keys.routes(runtime.storage, runtime.auth, runtime.hasher, runtime.accountant),
        provider_keys.routes(runtime.storage, runtime.provider_keys, runtime.upstreams),
        credits.routes(runtime.storage, runtime.accountant, runtime.payments),
        files.routes(
            runtime.files, runtime.storage.orgs, runtime.config.files, runtime.storage.idempotency
        ),
        images.routes(
            ImagesDeps(
                deps,
                runtime.images,
                runtime.config.public_base_url,
                runtime.config.images.default_model,
            )
        ),
        responses.routes(ResponsesDeps(deps, runtime.responses)),
        fine_tuning.routes(fine_tuning_deps(runtime)),
        webhooks.routes(
            runtime.storage,
            WatchedBox(runtime.master_key, WEBHOOK_SECRETS, runtime.keyring_watch),
            runtime.config.webhooks,
            runtime.webhooks.wake,
        ),
        operations.routes(
            runtime.readiness,
            runtime.supervisor,
            runtime.metrics,
            all_operations,
            worker,
            services={"upstreams": runtime.upstreams.statistics},
        ),
        *extra,
    ]
    app = WebApp(
        (route for area in areas for route in area),
        runtime.auth,
        body_limits(server),
        OperatorKeys(runtime.config.operator_keys),
        limiter=runtime.limiter,
    )
    completions = CompletionEvents(
        runtime.event_writer,
        inference.COMPLETION_ROUTES
        | audio.COMPLETION_ROUTES
        | images.COMPLETION_ROUTES
        | responses.COMPLETION_ROUTES
        | {rerank.RERANK_PATH},
        runtime.config.webhooks.completion_success_sample_rate,
        accountant=runtime.accountant,
    )
    return RequestMiddleware(
        app, runtime.metrics, log_requests=server.access_log, on_finish=(completions.finished,)
    )
