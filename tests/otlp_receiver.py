"""An OTLP/HTTP trace receiver for tests: a real HTTP server on loopback (the webhook
receiver's, tests/webhook_receiver.py) taking `POST /v1/traces`, each body decoded as the
protobuf `ExportTraceServiceRequest` with OpenTelemetry's own generated classes, so a test reads
the spans exactly as a collector would get them.

The gateway exports from the batch processor's thread; a test makes it send what has ended
with `flushed(tracing)` (force_flush in a thread, so that this Trio server can answer it).
"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.webhook_receiver import Receiver, response, serve_receiver

SERVER, CLIENT, INTERNAL = 2, 3, 1  # Span.SpanKind values
STATUS_ERROR = 2  # Status.StatusCode.STATUS_CODE_ERROR


@dataclass(frozen=True)
class Event:
    name: str
    time_ns: int


@dataclass(frozen=True)
class ExportedSpan:
    name: str
    trace_id: str  # hex
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[Event]
    status_code: int
    status_message: str
    resource: dict[str, Any] = field(default_factory=dict)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass
class OtlpReceiver:
    http: Receiver

    @property
    def url(self) -> str:
        """The collector's base URL, as `[telemetry] otlp_endpoint` takes it."""
        return f"http://127.0.0.1:{self.http.port}"

    def requests(self) -> list[ExportTraceServiceRequest]:
        decoded = []
        for arrival in self.http.arrivals:
            assert (arrival.method, arrival.target) == ("POST", "/v1/traces"), arrival.target
            assert arrival.header("content-type") == "application/x-protobuf"
            body = arrival.body
            if arrival.header("content-encoding") == "gzip":
                body = gzip.decompress(body)
            message = ExportTraceServiceRequest()
            message.ParseFromString(body)
            decoded.append(message)
        return decoded

    def spans(self) -> list[ExportedSpan]:
        out = []
        for message in self.requests():
            for resource_spans in message.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.append(
                            ExportedSpan(
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                kind=span.kind,
                                start_ns=span.start_time_unix_nano,
                                end_ns=span.end_time_unix_nano,
                                attributes=_attributes(span.attributes),
                                events=[Event(e.name, e.time_unix_nano) for e in span.events],
                                status_code=span.status.code,
                                status_message=span.status.message,
                                resource=resource,
                            )
                        )
        return out

    def trace(self, trace_id: str) -> list[ExportedSpan]:
        return [span for span in self.spans() if span.trace_id == trace_id]


_OK = response(
    200,
    ExportTraceServiceResponse().SerializeToString(),
    "Content-Type: application/x-protobuf\r\n",
)


@asynccontextmanager
async def otlp_receiver() -> AsyncIterator[OtlpReceiver]:
    async with trio.open_nursery() as nursery:
        http: Receiver = await nursery.start(partial(serve_receiver, tls=None))
        http.default = _OK
        yield OtlpReceiver(http)
        nursery.cancel_scope.cancel()


async def flushed(tracing: Any) -> None:
    """Every span the gateway ended so far has been exported (and received)."""
    assert await trio.to_thread.run_sync(tracing.force_flush)
