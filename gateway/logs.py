"""Logging: every line is one JSON object of one shape, the access log's and everyone else's.

    {"timestamp": "2026-11-27T14:24:44.123Z", "level": "INFO", "logger": "gateway.access",
     "message": "...", "request_id": "req_..." | null, "trace_id": "4bf9..." | null,
     "span_id": "00f0..." | null, ...}

`request_id` is the request's (`x-request-id`) on any line logged while serving it: the request
middleware sets `REQUEST_ID` (a context variable: Trio gives each task its own context, and
tasks started from a request's task inherit it). With tracing on (`[telemetry]`,
gateway/telemetry/), `trace_id` and `span_id` are those of the request's server span
(`TRACE_IDS`, set the same way), null otherwise. An exception's traceback is the `exception`
field. Access lines (`AccessLine`) add their own fields beside these (docs/operations.md,
"Logs"). Anything shaped like one of our credentials is masked (`redact`) in the message and
the traceback. Access lines go to stdout, the rest to stderr, as before.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from contextvars import ContextVar
from typing import TextIO

import msgspec

# The request being served by the current task (gateway/web/middleware.py), or None.
REQUEST_ID: ContextVar[str | None] = ContextVar("gateway_request_id", default=None)
# Its trace and server span ids (hex), when tracing is on (gateway/web/middleware.py).
TRACE_IDS: ContextVar[tuple[str, str] | None] = ContextVar("gateway_trace_ids", default=None)

# Organizations' keys are base62 after their prefix; an operator key may hold any bearer-token
# character (GATEWAY_OPERATOR_KEY is chosen by the operator).
_CREDENTIAL = re.compile(
    r"(service_(?:mgmt|sk)_[A-Za-z]*_?)[A-Za-z0-9]+|(service_op_)[A-Za-z0-9._~+/=%-]+"
)


def redact(text: str) -> str:
    """Mask anything shaped like one of our credentials (say, pasted into a URL by mistake)."""
    return _CREDENTIAL.sub(_mask, text) if "service_" in text else text


def _mask(found: re.Match[str]) -> str:
    return (found.group(1) or found.group(2)) + "***"


class AccessLine:
    """An access log line's fields, logged as the message: the JSON formatter writes them as
    fields of the line; anything else reading the record (`getMessage()`) gets them as JSON."""

    __slots__ = ("fields", "summary")

    def __init__(self, fields: dict[str, object], summary: str) -> None:
        self.fields = fields
        self.summary = summary  # the line's `message`: "POST /v1/chat/completions 200"

    def __str__(self) -> str:
        return _encode(self.fields).decode()


class JsonFormatter(logging.Formatter):
    """One JSON object per record (the module docstring's shape)."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.msg
        access = msg if isinstance(msg, AccessLine) else None
        ids = TRACE_IDS.get()
        entry: dict[str, object] = {
            "timestamp": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": access.summary if access is not None else redact(record.getMessage()),
            "request_id": REQUEST_ID.get(),
            "trace_id": None if ids is None else ids[0],
            "span_id": None if ids is None else ids[1],
        }
        if access is not None:
            entry.update(access.fields)
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exception"] = redact(record.exc_text)
        if record.stack_info:
            entry["stack"] = redact(self.formatStack(record.stack_info))
        return _encode(entry).decode()


_second: list[tuple[int, str]] = [(-1, "")]  # the last second formatted (one per second)


_encode = msgspec.json.Encoder(enc_hook=str).encode  # anything else a message carries: str()


def _timestamp(created: float) -> str:
    """RFC 3339 in UTC to the millisecond: 2026-11-27T14:24:44.123Z."""
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    last, text = _second[0]
    if last != seconds:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second[0] = (seconds, text)
    return f"{text}.{millis:03d}Z"


def setup_logging(
    level: str = "INFO", *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> None:
    """JSON lines: access lines on `stdout`, the rest on `stderr` (the process's by default).
    Python's warnings (a library's deprecation, say) become lines too (logger `py.warnings`)."""
    formatter = JsonFormatter()
    logging.captureWarnings(True)
    root = logging.getLogger()
    root.handlers.clear()
    plain = logging.StreamHandler(stderr or sys.stderr)
    plain.setFormatter(formatter)
    root.addHandler(plain)
    root.setLevel(level)

    access = logging.getLogger("gateway.access")
    access.handlers.clear()
    json_lines = logging.StreamHandler(stdout or sys.stdout)
    json_lines.setFormatter(formatter)
    access.addHandler(json_lines)
    access.propagate = False
