"""OpenTelemetry tracing (docs/operations.md, "Tracing").

setup.py    `open_tracing`: None when `[telemetry]` has no endpoint (nothing of OpenTelemetry
            is imported then), else a `Tracing` whose provider is shut down (flushed) on leaving
tracing.py  the SDK's provider, sampler and exporter, and `RequestTrace`: one request's spans

Only setup.py may be imported unconditionally: every other module imports the SDK. The hot path
holds a `RequestTrace | None` on the request's context and checks it for None at each span site,
so with tracing off a request pays that check and nothing else.
"""
