"""Assemble the ASGI application of one instance from its runtime: the routes of every area the
runtime opened (gateway/runtime.py), and of the operations area made here, in one request layer
(gateway/web/), wrapped in the request middleware (which turns the areas' completion routes
into completion.* events)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway import audio
from gateway.auth.operator import OperatorKeys
from gateway.config import ServerConfig
from gateway.console.app import Console, WithConsole
from gateway.files.form import FORM_OVERHEAD_BYTES
from gateway.inference.completion_events import CompletionEvents
from gateway.operations.area import open_operations
from gateway.operations.routes import ALONE, Worker
from gateway.runtime import Runtime
from gateway.server.asgi import ASGIApp
from gateway.web import BodyLimits, Operation, Routes, WebApp
from gateway.web.middleware import RequestMiddleware


def body_limits(server: ServerConfig) -> BodyLimits:
    """The request layer's caps. A file route's body is its form: the file (whose own limit the
    upload enforces, gateway/files/) plus at most FORM_OVERHEAD_BYTES around it."""
    return BodyLimits(
        json=server.max_request_body_bytes,
        audio=server.max_audio_body_bytes + audio.FORM_OVERHEAD_BYTES,
        file=server.max_file_body_bytes + FORM_OVERHEAD_BYTES,
        vision=server.max_vision_body_bytes + FORM_OVERHEAD_BYTES,
    )


def create_app(runtime: Runtime, extra: Sequence[Routes] = (), worker: Worker = ALONE) -> ASGIApp:
    """The app wrapped in the request middleware. `extra` lets tests mount routes of their own;
    `worker` says which of `--workers N` processes this is (`/v1/admin/actors` shows it)."""
    server = runtime.config.server
    app: WebApp | None = None

    def all_operations() -> list[Operation]:
        assert app is not None
        return app.router.operations

    areas = [*runtime.areas, open_operations(runtime, all_operations, worker)]
    operator = OperatorKeys(runtime.config.operator_keys)
    app = WebApp(
        (route for routes in [*(area.routes for area in areas), *extra] for route in routes),
        runtime.auth,
        body_limits(server),
        operator,
        limiter=runtime.limiter,
    )
    completions = CompletionEvents(
        runtime.event_writer,
        frozenset[str]().union(*(area.completion_routes for area in areas)),
        runtime.config.webhooks.completion_success_sample_rate,
        accountant=runtime.accountant,
    )
    console = Console(runtime, operator, worker)  # /console: its pages, not the JSON API
    return RequestMiddleware(
        WithConsole(app, console),
        runtime.metrics,
        log_requests=server.access_log,
        on_finish=(completions.finished,),
        tracing=runtime.tracing,
    )
