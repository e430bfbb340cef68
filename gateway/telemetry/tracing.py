"""The OpenTelemetry SDK, set up from `[telemetry]`, and one request's spans (`RequestTrace`).

Imported only when tracing is on (gateway/telemetry/setup.py). The provider is this process's
own, never the global one: tests run several gateways in one process, and the gateway sets no
global state a library could pick up. Spans go to a `BatchSpanProcessor`, which queues them
(dropping past `max_queue_size`, never blocking a request) and exports them from its own
thread with the OTLP/HTTP protobuf exporter: nothing here awaits, nothing touches Trio.

A request's spans are made with explicit parents rather than by attaching the OpenTelemetry
context to the task: the request's steps run in one task, but a stream's upstream call runs in
a relay actor's task, which does not inherit the request's context. So the span of the upstream
call is made here and its `traceparent` handed to the upstream client as header bytes
(`UpstreamSpan.headers`), wherever the call happens.

Names and attributes follow the OpenTelemetry semantic conventions: HTTP for the server span,
GenAI (`gen_ai.*`) for the request and the upstream call. docs/operations.md ("Tracing") lists
them.
"""

from __future__ import annotations

import math
import os
import random
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import msgspec
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.environment_variables import OTEL_SDK_DISABLED
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import (
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gateway.config import TelemetryConfig
from gateway.logs import redact
from gateway.server.asgi import Scope
from gateway.telemetry.spans import NO_STEP, NoStep, Quiet, Step, UpstreamSpan, put

if TYPE_CHECKING:
    from gateway.web.context import RequestContext

# Longer header values are ignored (a `traceparent` of version 00 has 55 characters; W3C asks
# for at least 512 characters of `tracestate` to be kept, we keep up to 4 KiB).
MAX_TRACEPARENT = 256
MAX_TRACESTATE = 4096
_PROPAGATOR = TraceContextTextMapPropagator()
_SPAN_BITS = (1 << 64) - 1
_EMPTY = Context()
# HTTP methods a span is named after; any other is `_OTHER` (HTTP conventions).
_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)
# GenAI's `gen_ai.provider.name` for each provider kind (the kind itself where the conventions
# name no value: ollama, vllm).
_GENAI_PROVIDER = {"openai": "openai", "anthropic": "anthropic", "cohere": "cohere"}
# `gen_ai.operation.name` by route; other routes use their last path segment.
_OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "chat",
    "/v1/completions": "text_completion",
    "/v1/embeddings": "embeddings",
}


class _Choice(msgspec.Struct):
    finish_reason: str | None = None


class _Answer(msgspec.Struct):
    choices: list[_Choice] = []


_ANSWER = msgspec.json.Decoder(_Answer).decode
_NUMBER = msgspec.json.Decoder(float | None).decode


class SampleDecision:
    """Whether a request is traced, decided before the SDK is asked for anything: an unsampled
    request then costs no SDK span at all (`RequestTrace.quiet`). A client's valid
    `traceparent` is followed, sampled or not; a new trace is sampled with probability `ratio`
    (the SDK's `ParentBased(TraceIdRatioBased)` made the same choice, after building the span)."""

    __slots__ = ("_random", "ratio")

    def __init__(self, ratio: float, rng: random.Random | None = None) -> None:
        self.ratio = ratio
        self._random = rng or random.Random()

    def __call__(self, parent: SpanContext | None) -> bool:
        if parent is not None:
            return parent.trace_flags.sampled
        ratio = self.ratio
        return ratio >= 1.0 or (ratio > 0.0 and self._random.random() < ratio)

    def new_id(self, bits: int) -> int:
        """A random non-zero id (W3C forbids all-zero ones) for an unsampled request."""
        return self._random.getrandbits(bits) or 1


class Tracing:
    """This process's tracer provider and the factory of request traces."""

    def __init__(self, config: TelemetryConfig, rng: random.Random | None = None) -> None:
        assert config.traces_url is not None and config.sample_ratio is not None
        exporter = OTLPSpanExporter(endpoint=config.traces_url, timeout=config.export_timeout_s)
        self.processor = BatchSpanProcessor(
            exporter,
            max_queue_size=config.max_queue_size,
            schedule_delay_millis=config.export_delay_s * 1000,
            max_export_batch_size=config.max_export_batch_size,
            export_timeout_millis=config.export_timeout_s * 1000,
        )
        # Sampling is decided in `begin` (`SampleDecision`): the SDK is asked only for the
        # spans of sampled requests, and records them all (`ALWAYS_ON`: no second decision,
        # which cost each span a look-up of its parent).
        self.decide = SampleDecision(config.sample_ratio, rng)
        # The SDK's own off switch (all its spans invalid): then it is asked for every request,
        # and nothing is propagated (an invalid span has no traceparent).
        self.sdk_off = os.environ.get(OTEL_SDK_DISABLED, "").strip().lower() == "true"
        resource = Resource.create({"service.name": config.service_name})
        self.provider = TracerProvider(sampler=ALWAYS_ON, resource=resource, shutdown_on_exit=False)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("gateway")

    def begin(self, scope: Scope, ctx: RequestContext) -> RequestTrace:
        """The server span of one HTTP request, child of the client's `traceparent` when it
        sent a valid one (an invalid one is ignored: a new trace). Unsampled: no SDK span, only
        ids for the log lines and the unsampled `traceparent` sent upstream."""
        parent = incoming_context(scope.get("headers"))
        remote = None
        if parent is not _EMPTY:  # a traceparent was read: taken when the propagator took it
            remote = get_current_span(parent).get_span_context()
            if not remote.is_valid:
                remote = None
        if not self.decide(remote) and not self.sdk_off:
            return RequestTrace.quiet(self, remote)
        method = ctx.method if ctx.method in _METHODS else "_OTHER"
        attributes: dict[str, AttributeValue] = {
            "http.request.method": method,
            "url.path": redact(ctx.path),
            "url.scheme": str(scope.get("scheme") or "http"),
            "gateway.request_id": ctx.request_id,
        }
        if method != ctx.method:  # the conventions: names stay few, the original is kept
            attributes["http.request.method_original"] = ctx.method[:64]
        span = self.tracer.start_span(
            method,  # named after its route once routed (`finish`)
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
        )
        return RequestTrace(self, span, method)

    def force_flush(self, timeout_s: float = 30.0) -> bool:
        """Export every span ended so far (blocking: tests, and `shutdown`)."""
        return self.provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Export what is queued and stop the exporter's thread (blocking)."""
        self.provider.shutdown()


def incoming_context(headers: object) -> Context:
    """The W3C trace context a client sent (`traceparent`, `tracestate`), or an empty context.

    Hostile input is ignored, never an error: repeated or over-long `traceparent`s, one that is
    not exactly W3C's (the propagator's own check: version, lengths, hex, all-zero ids), and
    an over-long `tracestate` (dropped on its own). Repeated `tracestate` fields are joined."""
    if not isinstance(headers, list | tuple):  # ASGI's list (cheaper than an ABC's check)
        return _EMPTY
    parents: list[bytes] = []
    states: list[bytes] = []
    for name, value in headers:
        if name == b"traceparent":
            parents.append(value)
        elif name == b"tracestate":
            states.append(value)
    if len(parents) != 1 or len(parents[0]) > MAX_TRACEPARENT:  # none is the usual case
        return _EMPTY
    carrier = {"traceparent": parents[0].decode("latin-1")}
    state = b",".join(states)
    if state and len(state) <= MAX_TRACESTATE:
        carrier["tracestate"] = state.decode("latin-1")
    try:
        return _PROPAGATOR.extract(carrier)
    except Exception:  # the propagator checks its input; this is a last guard
        return _EMPTY


class RequestTrace:
    """One request's server span and the steps under it. Sites check `ctx.trace` for None
    and then call these. An unsampled request (`quiet`) has no span at all: its steps are
    `NO_STEP`, its upstream calls all carry one `traceparent` flagged unsampled
    (`quiet_headers`)."""

    __slots__ = (
        "_parent",
        "_tracing",
        "finish_reasons",
        "ids",
        "method",
        "params",
        "quiet_headers",
        "recording",
        "request_model",
        "span",
    )

    def __init__(self, tracing: Tracing, span: Span | None, method: str) -> None:
        self._tracing = tracing
        self.span = span
        self.method = method
        self.request_model: str | None = None  # the model the client asked for
        self.params: dict[str, AttributeValue] = {}  # gen_ai.request.* the client set
        self.finish_reasons: list[str] = []  # the answer's, when the route read them
        # Not recording: what every upstream call sends (none under the SDK's off switch).
        self.quiet_headers = b""
        if span is None:  # `quiet` sets the rest
            self.recording = False
            self._parent = _EMPTY
            self.ids: tuple[str, str] | None = None
            return
        # Non-recording only under the SDK's off switch: no child span is made then.
        self.recording = span.is_recording()
        self._parent = set_span_in_context(span)
        context = span.get_span_context()
        # For the log lines written while serving it (gateway/logs.py TRACE_IDS); None when
        # the SDK made no span at all (OTEL_SDK_DISABLED=true: its invalid all-zero ids).
        self.ids = (
            (f"{context.trace_id:032x}", f"{context.span_id:016x}") if context.is_valid else None
        )

    @classmethod
    def quiet(cls, tracing: Tracing, parent: SpanContext | None) -> RequestTrace:
        """An unsampled request: the trace goes on upstream, flagged unsampled (W3C), under a
        span id of its own (the one its log lines carry), in the parent's trace if any."""
        trace = cls(tracing, None, "")  # its method names no span
        decide = tracing.decide
        bits = decide.new_id(192)  # a new trace id's 128 bits and the span id's 64, at once
        if not bits >> 64 or not bits & _SPAN_BITS:  # never all-zero (W3C)
            bits = decide.new_id(128) << 64 | decide.new_id(64)
        ids = f"{bits:048x}"
        if parent is None:  # a new trace: W3C level 2's `random` flag, as the SDK sets it
            trace_id, flags = ids[:32], "02"
        else:  # the parent's flags (its sampled bit is clear: that is why we are here)
            trace_id, flags = f"{parent.trace_id:032x}", f"{int(parent.trace_flags):02x}"
        trace.ids = (trace_id, ids[32:])
        line = f"traceparent: 00-{trace_id}-{ids[32:]}-{flags}\r\n"
        state = parent.trace_state.to_header() if parent is not None else ""
        if state:
            line += f"tracestate: {state}\r\n"
        trace.quiet_headers = line.encode("latin-1")
        return trace

    def step(self, name: str, **attributes: AttributeValue) -> Step | NoStep:
        """A child span around one step (`with trace.step("auth"):`), ended with the block;
        an exception marks it failed with its error code."""
        if not self.recording:
            return NO_STEP
        span = self._tracing.tracer.start_span(
            name, context=self._parent, kind=SpanKind.INTERNAL, attributes=attributes or None
        )
        return Step(span)

    def note_chat(self, model: str, max_tokens: int | None, temperature: bytes | None) -> None:
        """A chat request's GenAI attributes (`gen_ai.request.model`, `.max_tokens`,
        `.temperature`: its raw JSON, kept when a number), on the request's span and on each
        upstream call's."""
        if not self.recording:
            return
        self.request_model = model
        if max_tokens is not None:
            self.params["gen_ai.request.max_tokens"] = max_tokens
        if temperature is not None:
            try:
                value = _NUMBER(temperature)
            except (msgspec.DecodeError, msgspec.ValidationError):
                value = None
            if value is not None and math.isfinite(value):
                self.params["gen_ai.request.temperature"] = float(value)

    def note_answer(self, body: bytes) -> None:
        """A chat answer's finish reasons (`gen_ai.response.finish_reasons`), from its JSON."""
        if not self.recording:
            return
        try:
            answer = _ANSWER(body)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return
        self.finish_reasons = [c.finish_reason for c in answer.choices if c.finish_reason]

    def upstream(
        self, route: str | None, provider: str, kind: str, base_url: str, upstream_model: str
    ) -> UpstreamSpan | Quiet:
        """The CLIENT span of one upstream attempt, named `{operation} {model}` (GenAI), and
        the `traceparent` (and `tracestate`) to send with it."""
        if not self.recording:  # unsampled (the routes send `quiet_headers` without asking)
            return Quiet(self.quiet_headers)
        operation = operation_name(route)
        genai = _GENAI_PROVIDER.get(kind, kind)
        host, port = _server(base_url)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": genai,
            "gen_ai.system": genai,
            "gen_ai.request.model": upstream_model,
            "server.address": host,
            "server.port": port,
            "gateway.provider": provider,
            **self.params,
        }
        span = self._tracing.tracer.start_span(
            f"{operation} {upstream_model}",
            context=self._parent,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        return UpstreamSpan(span, upstream_model)

    def finish(self, ctx: RequestContext, status: int) -> None:
        """End the server span with what the request came to (after its last byte: a stream's
        span ends with the stream). Its attributes are set in one call (the SDK takes its lock
        and checks its limits per call)."""
        span = self.span
        if span is None:
            return
        if not self.recording:
            span.end()
            return
        route = ctx.route
        attributes: dict[str, AttributeValue] = {"http.response.status_code": status}
        if route is not None:
            span.update_name(f"{self.method} {route}")
            attributes["http.route"] = route
        put(attributes, "gateway.org_id", ctx.org_id)
        put(attributes, "gateway.key_id", ctx.key_id)
        put(attributes, "gateway.deployment", ctx.deployment)
        put(attributes, "gateway.attempts", ctx.attempts)
        put(attributes, "gateway.cost_usd", ctx.cost_usd)
        if ctx.model is not None:  # an inference request: GenAI's attributes too
            attributes["gen_ai.operation.name"] = operation_name(route)
            attributes["gen_ai.request.model"] = self.request_model or ctx.model
            if ctx.deployment:
                attributes["gen_ai.response.model"] = ctx.model
            put(attributes, "gen_ai.usage.input_tokens", ctx.prompt_tokens)
            put(attributes, "gen_ai.usage.output_tokens", ctx.completion_tokens)
            attributes.update(self.params)
            if self.finish_reasons:
                attributes["gen_ai.response.finish_reasons"] = self.finish_reasons
        if status >= 400:
            code = ctx.error_code or ctx.error_type or str(status)
            attributes["error.type"] = code
            if status >= 500:  # HTTP conventions: a 4xx is the client's, not the server's
                span.set_status(Status(StatusCode.ERROR, code))
        span.set_attributes(attributes)
        span.end()


def operation_name(route: str | None) -> str:
    if route is None:
        return "unknown"
    return _OPERATIONS.get(route) or route.rstrip("/").rpartition("/")[2]


@lru_cache(maxsize=256)
def _server(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
