"""Tracing for the life of one process (`gateway serve --workers N`: each worker its own
provider, exporting from its own thread)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from gateway.config import TelemetryConfig

if TYPE_CHECKING:
    from gateway.telemetry.tracing import Tracing


@asynccontextmanager
async def open_tracing(config: TelemetryConfig) -> AsyncIterator[Tracing | None]:
    """None when tracing is off (no endpoint: the SDK is not imported). Else the tracer, shut
    down on leaving: the spans still queued are sent first (in a thread, within the export
    timeout), so that the requests drained at shutdown are in their traces."""
    if config.otlp_endpoint is None:
        yield None
        return
    from gateway.telemetry.tracing import Tracing  # the SDK: only when tracing is on

    tracing = Tracing(config)
    try:
        yield tracing
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(tracing.shutdown)
