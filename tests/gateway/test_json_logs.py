"""Every log line is one JSON object of one shape (gateway/logs.py): the access log's on stdout,
everyone else's on stderr, with the request id on the lines written while a request is served
(tasks it starts included), tracebacks in `exception`, credentials masked."""

from __future__ import annotations

import io
import json
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from gateway.logs import REQUEST_ID, JsonFormatter, setup_logging
from gateway.web import Auth, Operation, Request, Response, Routes
from tests.harness import gateway_config, running_gateway
from tests.waiting import wait_until

FIELDS = {"timestamp", "level", "logger", "message", "request_id", "trace_id"}
SECRET = "service_sk_live_" + "A1b2" * 8


class Streams:
    def __init__(self) -> None:
        self.stdout = io.StringIO()
        self.stderr = io.StringIO()

    @staticmethod
    def lines(stream: io.StringIO) -> list[dict[str, Any]]:
        """Every line, parsed: each must be one JSON object with the shared fields."""
        parsed = []
        for line in stream.getvalue().splitlines():
            entry = json.loads(line)
            assert isinstance(entry, dict) and FIELDS <= set(entry), line
            assert entry["trace_id"] is None  # tracing is off here (tests/gateway/test_tracing.py)
            parsed.append(entry)
        return parsed


@pytest.fixture
def streams() -> Iterator[Streams]:
    """setup_logging into buffers; the logging configuration is put back afterwards."""
    root, access = logging.getLogger(), logging.getLogger("gateway.access")
    saved = (root.handlers[:], root.level, access.handlers[:], access.propagate)
    captured = Streams()
    setup_logging("INFO", stdout=captured.stdout, stderr=captured.stderr)
    try:
        yield captured
    finally:
        logging.captureWarnings(False)
        root.handlers[:], access.handlers[:] = saved[0], saved[2]
        root.setLevel(saved[1])
        access.propagate = saved[3]


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError(f"boom with {SECRET}")
        except RuntimeError:
            exc_info = sys.exc_info()
    return logging.LogRecord("gateway.test", logging.ERROR, __file__, 1, msg, args, exc_info)


def test_a_line_has_the_shape_a_traceback_and_no_secret() -> None:
    line = JsonFormatter().format(_record("failed for %s", SECRET, exc=True))
    entry = json.loads(line)
    assert FIELDS <= set(entry)
    assert entry["level"] == "ERROR" and entry["logger"] == "gateway.test"
    assert entry["message"] == "failed for service_sk_live_***"
    assert entry["request_id"] is None and entry["trace_id"] is None
    assert entry["timestamp"].endswith("Z") and entry["timestamp"][10] == "T"
    assert "Traceback (most recent call last)" in entry["exception"]
    assert "RuntimeError: boom with service_sk_live_***" in entry["exception"]
    assert SECRET not in line and "\n" not in line
    token = REQUEST_ID.set("req_inside")
    try:
        assert json.loads(JsonFormatter().format(_record("x")))["request_id"] == "req_inside"
    finally:
        REQUEST_ID.reset(token)


def _routes() -> Routes:
    routes = Routes()
    log = logging.getLogger("gateway.test")

    @routes.operation(Operation("GET", "/v1/test/log", "logs", "Test", auth=Auth.NONE))
    async def logs(request: Request) -> Response:
        log.warning("inside the request")

        async def child() -> None:
            log.warning("in a task the request started")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
        return Response(b"{}")

    @routes.operation(Operation("GET", "/v1/test/crash", "crashes", "Test", auth=Auth.NONE))
    async def crash(request: Request) -> Response:
        raise RuntimeError(f"crash on purpose near {SECRET}")

    return routes


@pytest.mark.parametrize("backend", ["sqlite"])  # about logging, not storage
async def test_every_line_is_json_and_lines_inside_a_request_carry_its_id(
    streams: Streams, database_url: str, tmp_path: Path
) -> None:
    config = gateway_config(database_url, tmp_path)
    async with running_gateway(config, extra_routes=[_routes()]) as gw:
        logged = await gw.client.get("/v1/test/log")
        crashed = await gw.client.get(f"/v1/test/crash?key={SECRET}")
        assert logged.status_code == 200 and crashed.status_code == 500
        await wait_until(lambda: len(Streams.lines(streams.stdout)) >= 2)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("a library's deprecation", DeprecationWarning, stacklevel=1)
    application = Streams.lines(streams.stderr)
    access = Streams.lines(streams.stdout)
    assert application and access

    request_id = logged.headers["x-request-id"]
    inside = [e for e in application if e["logger"] == "gateway.test"]
    assert [(e["message"], e["request_id"]) for e in inside] == [
        ("inside the request", request_id),
        ("in a task the request started", request_id),
    ]
    assert all(e["level"] == "WARNING" for e in inside)
    warned = [e for e in application if e["logger"] == "py.warnings"]
    assert len(warned) == 1 and "a library's deprecation" in warned[0]["message"]

    crash_id = crashed.headers["x-request-id"]
    unhandled = next(e for e in application if e["request_id"] == crash_id)
    assert unhandled["level"] == "ERROR" and "/v1/test/crash" in unhandled["message"]
    assert "RuntimeError: crash on purpose near service_sk_live_***" in unhandled["exception"]

    by_id = {e["request_id"]: e for e in access}
    line = by_id[request_id]
    assert line["logger"] == "gateway.access" and line["level"] == "INFO"
    assert line["message"] == "GET /v1/test/log 200"
    assert line["route"] == "/v1/test/log" and line["status"] == 200
    assert by_id[crash_id]["status"] == 500
    for entry in (*application, *access):  # the credential in the query and the error
        assert SECRET not in json.dumps(entry)
