"""The span objects a request's steps use (gateway/telemetry/tracing.py makes them): a child
step (`Step`, or `NO_STEP` for an unsampled request), an upstream attempt's CLIENT span and
the `traceparent` lines sent with it (`UpstreamSpan`, or `Quiet` when unsampled), and how an
exception marks a span. Imported only when tracing is on, like tracing.py."""

from __future__ import annotations

import time
from types import TracebackType

from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from protocol.errors import APIError, UpstreamError, UpstreamStatusError, UpstreamTimeout


class Step:
    """A context manager ending a child span; an exception marks it ERROR with its code."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def __enter__(self) -> Span:
        return self.span

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            failed(self.span, exc)
        self.span.end()


class NoStep:
    """The step of an unsampled request: nothing to start or end."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


NO_STEP = NoStep()


class Quiet:
    """An unsampled request's upstream attempt: only the header lines sent with it (the same
    for every attempt), nothing recorded."""

    __slots__ = ("headers",)

    def __init__(self, headers: bytes) -> None:
        self.headers = headers

    def first_byte(self, seconds: float) -> None:
        return None

    def end(
        self,
        input_tokens: int | None,
        output_tokens: int | None,
        exc: BaseException | None = None,
        finish_reasons: list[str] | None = None,
    ) -> None:
        return None


class UpstreamSpan:
    """One upstream attempt's CLIENT span, and the header lines that carry it upstream."""

    __slots__ = ("began", "headers", "model", "span", "ttfb_ms")

    def __init__(self, span: Span, model: str) -> None:
        self.span = span
        self.model = model
        self.began = time.perf_counter()
        self.ttfb_ms: float | None = None
        context = span.get_span_context()
        line = f"traceparent: 00-{context.trace_id:032x}-{context.span_id:016x}"
        line += f"-{int(context.trace_flags):02x}\r\n"
        state = context.trace_state.to_header() if context.trace_state else ""
        if state:
            line += f"tracestate: {state}\r\n"
        self.headers = line.encode("latin-1")

    def first_byte(self, seconds: float) -> None:
        """The answer's first byte came `seconds` after the attempt began (an event now, the
        attribute with the others at `end`)."""
        at = time.time_ns() - int((time.perf_counter() - self.began - seconds) * 1e9)
        self.span.add_event("gen_ai.first_byte", timestamp=at)
        self.ttfb_ms = round(seconds * 1000, 3)

    def end(
        self,
        input_tokens: int | None,
        output_tokens: int | None,
        exc: BaseException | None = None,
        finish_reasons: list[str] | None = None,
    ) -> None:
        span = self.span
        attributes: dict[str, AttributeValue] = {}
        put(attributes, "gateway.time_to_first_byte_ms", self.ttfb_ms)
        if exc is None:
            attributes["gen_ai.response.model"] = self.model
            put(attributes, "gen_ai.usage.input_tokens", input_tokens)
            put(attributes, "gen_ai.usage.output_tokens", output_tokens)
            if finish_reasons:
                attributes["gen_ai.response.finish_reasons"] = finish_reasons
        if attributes:
            span.set_attributes(attributes)
        if exc is not None:
            failed(span, exc)
        span.end()


def failed(span: Span, exc: BaseException) -> None:
    """Mark `span` as ended by `exc`: ERROR with the error's code (a cancellation, the client
    leaving or the server stopping, is noted but is not the step's failure)."""
    if not span.is_recording():
        return
    if not isinstance(exc, Exception):
        span.set_attribute("error.type", "cancelled")
        return
    code = error_code(exc)
    span.set_attribute("error.type", code)
    if isinstance(exc, UpstreamStatusError):
        span.set_attribute("http.response.status_code", exc.status)
    span.set_status(Status(StatusCode.ERROR, code))


def error_code(exc: Exception) -> str:
    """The error's code as the client would be answered it, or its class for anything else."""
    if isinstance(exc, APIError):
        return exc.code or exc.type
    if isinstance(exc, UpstreamTimeout):
        return "upstream_timeout"
    if isinstance(exc, UpstreamStatusError):
        return str(exc.status)  # the conventions' error.type for an HTTP client: the status
    if isinstance(exc, UpstreamError):
        return "upstream_error"
    return type(exc).__qualname__


def put(attributes: dict[str, AttributeValue], key: str, value: AttributeValue | None) -> None:
    if value is not None:
        attributes[key] = value
