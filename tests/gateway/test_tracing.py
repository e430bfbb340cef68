"""OpenTelemetry tracing end to end: a gateway with `[telemetry]` pointed at a real OTLP/HTTP
receiver on loopback (tests/otlp_receiver.py, decoding the protobuf as a collector would), the
bench suite's simulated upstream behind it (which records the headers it got).

Sampling, the client's `traceparent` (honoured, and ignored when malformed), propagation
upstream, the GenAI attributes with the answer's token counts, a streamed request, the trace
ids on log lines; and, with telemetry off, that the SDK is never imported."""

from __future__ import annotations

import io
import json
import logging
import os
import random
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.config import ConfigError, load_config
from gateway.logs import setup_logging
from tests.backends import fresh_database_url
from tests.inference import Rig, chunks, inference_rig
from tests.otlp_receiver import (
    CLIENT,
    INTERNAL,
    SERVER,
    STATUS_ERROR,
    ExportedSpan,
    OtlpReceiver,
    flushed,
    otlp_receiver,
)
from tests.waiting import LIMIT_S

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
REPO = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def traced(
    tmp_path: Path, *, sample_ratio: float = 1.0, **rig: Any
) -> AsyncIterator[tuple[Rig, OtlpReceiver]]:
    async with otlp_receiver() as receiver, fresh_database_url("sqlite", tmp_path) as url:
        toml = f"""
[telemetry]
otlp_endpoint = "{receiver.url}"
sample_ratio = {sample_ratio}
export_delay_s = 0.05
service_name = "gateway-test"
"""
        async with inference_rig(url, tmp_path, extra_toml=toml, **rig) as r:
            yield r, receiver


async def trace_of(rig: Rig, receiver: OtlpReceiver, request_id: str) -> list[ExportedSpan]:
    """The spans of the trace whose server span is `request_id`'s, once that span (which ends
    just after the response's last byte) was exported."""
    tracing = rig.gateway.runtime.tracing
    with trio.fail_after(LIMIT_S):
        while True:
            await flushed(tracing)
            for span in receiver.spans():
                if span.kind == SERVER and span.attributes.get("gateway.request_id") == request_id:
                    return receiver.trace(span.trace_id)
            await trio.sleep(0.01)


def one(spans: list[ExportedSpan], name: str, **attributes: Any) -> ExportedSpan:
    found = [
        s
        for s in spans
        if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, [(s.name, s.attributes) for s in spans])
    return found[0]


def sampled(traceparent: str) -> tuple[str, str]:
    """The trace and parent ids of a version-00 `traceparent` whose sampled flag is set (other
    flags, W3C level 2's `random`, may be set too)."""
    version, trace_id, parent, flags = traceparent.split("-")
    assert version == "00" and int(flags, 16) & 1 == 1, traceparent
    return trace_id, parent


def upstream_headers(rig: Rig) -> dict[str, str]:
    sent = [r for r in rig.upstream.requests if r.path.endswith("/chat/completions")]
    return sent[-1].headers


async def test_a_chat_request_is_one_trace_with_its_steps_and_genai_attributes(
    tmp_path: Path,
) -> None:
    async with traced(tmp_path) as (rig, receiver):
        r = await rig.chat(
            {
                "model": "small",
                "messages": [{"role": "user", "content": "hello there"}],
                "max_tokens": 7,
                "temperature": 0.25,
            }
        )
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        spans = await trace_of(rig, receiver, r.headers["x-request-id"])

    server = one(spans, "POST /v1/chat/completions")
    assert server.kind == SERVER and server.parent_span_id == ""  # a new trace
    assert server.resource["service.name"] == "gateway-test"
    a = server.attributes
    assert a["http.request.method"] == "POST"
    assert a["url.path"] == "/v1/chat/completions"
    assert a["http.route"] == "/v1/chat/completions"
    assert a["http.response.status_code"] == 200
    assert a["gateway.request_id"] == r.headers["x-request-id"]
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "small"
    assert a["gen_ai.request.max_tokens"] == 7
    assert a["gen_ai.request.temperature"] == 0.25
    assert a["gen_ai.usage.input_tokens"] == usage["prompt_tokens"] > 0
    assert a["gen_ai.usage.output_tokens"] == usage["completion_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == [r.json()["choices"][0]["finish_reason"]]
    assert server.status_code != STATUS_ERROR

    auth = one(spans, "auth")
    rate = one(spans, "admission", **{"gateway.admission": "rate_limit"})
    budget = one(spans, "admission", **{"gateway.admission": "budget"})
    upstream = one(spans, "chat sim-small")
    settle = one(spans, "settle")
    for child in (auth, rate, budget, upstream, settle):
        assert child.parent_span_id == server.span_id, child.name
        assert server.start_ns <= child.start_ns <= child.end_ns <= server.end_ns, child.name
    assert {auth.kind, rate.kind, budget.kind, settle.kind} == {INTERNAL}
    assert auth.end_ns <= rate.start_ns and rate.end_ns <= budget.start_ns
    assert budget.end_ns <= upstream.start_ns <= settle.start_ns  # charged once answered
    assert len(spans) == 6  # nothing else, no stray span of another request

    u = upstream.attributes
    assert upstream.kind == CLIENT
    assert u["gen_ai.operation.name"] == "chat"
    assert u["gen_ai.provider.name"] == u["gen_ai.system"] == "openai"
    assert u["gen_ai.request.model"] == u["gen_ai.response.model"] == "sim-small"
    assert u["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert u["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert u["gen_ai.request.max_tokens"] == 7
    assert u["server.address"] == "127.0.0.1" and u["server.port"] > 0
    assert u["gateway.time_to_first_byte_ms"] >= 0
    assert [e.name for e in upstream.events] == ["gen_ai.first_byte"]
    assert upstream.start_ns <= upstream.events[0].time_ns <= upstream.end_ns
    assert settle.attributes["gateway.cost_micros"] > 0

    # The upstream got the upstream call's span as its parent, in the same trace.
    assert sampled(upstream_headers(rig)["traceparent"]) == (server.trace_id, upstream.span_id)


async def test_the_clients_traceparent_is_the_parent_and_tracestate_goes_upstream(
    tmp_path: Path,
) -> None:
    async with traced(tmp_path) as (rig, receiver):
        r = await rig.gateway.client.post(
            "/v1/chat/completions",
            json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
            headers={
                **rig.gateway.auth(rig.key),
                "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
                "tracestate": "vendor=abc,other=1",
            },
        )
        assert r.status_code == 200, r.text
        spans = await trace_of(rig, receiver, r.headers["x-request-id"])
        sent = upstream_headers(rig)

    server = one(spans, "POST /v1/chat/completions")
    assert server.trace_id == TRACE_ID and server.parent_span_id == PARENT_ID
    assert {s.trace_id for s in spans} == {TRACE_ID}
    upstream = one(spans, "chat sim-small")
    assert sampled(sent["traceparent"]) == (TRACE_ID, upstream.span_id)
    assert sent["tracestate"] == "vendor=abc,other=1"


async def test_an_unsampled_parent_is_honoured_and_still_propagated(tmp_path: Path) -> None:
    async with traced(tmp_path) as (rig, receiver):
        body = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
        quiet = await rig.gateway.client.post(
            "/v1/chat/completions",
            json=body,
            headers={**rig.gateway.auth(rig.key), "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"},
        )
        assert quiet.status_code == 200, quiet.text
        sent = upstream_headers(rig)
        loud = await rig.chat(body)  # sampled: once it is exported, so would the other be
        await trace_of(rig, receiver, loud.headers["x-request-id"])
        assert receiver.trace(TRACE_ID) == []
    # Not recorded here, but the trace goes on upstream, unsampled (W3C: flags 00).
    version, trace_id, parent, flags = sent["traceparent"].split("-")
    assert (version, trace_id) == ("00", TRACE_ID) and parent != PARENT_ID
    assert int(flags, 16) & 1 == 0


MALFORMED: list[list[tuple[bytes, bytes]]] = [
    [(b"traceparent", b"garbage")],
    [(b"traceparent", b"")],
    [(b"traceparent", f"ff-{TRACE_ID}-{PARENT_ID}-01".encode())],  # version ff is invalid
    [(b"traceparent", f"00-{'0' * 32}-{PARENT_ID}-01".encode())],  # all-zero trace id
    [(b"traceparent", f"00-{TRACE_ID}-{'0' * 16}-01".encode())],  # all-zero parent id
    [(b"traceparent", f"00-{TRACE_ID.upper()}-{PARENT_ID}-01".encode())],  # upper-case hex
    [(b"traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01-extra".encode())],  # v00 has 4 fields
    [(b"traceparent", f"00-{TRACE_ID[:-1]}-{PARENT_ID}-01".encode())],  # short trace id
    [(b"traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01".encode() + b"-" + b"a" * 5000)],
    [(b"traceparent", f"00-{TRACE_ID}\xff-{PARENT_ID}-01".encode("latin-1"))],
    [(b"traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01".encode())] * 2,  # sent twice
    [
        (b"traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01".encode()),
        (b"traceparent", b"00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01"),
    ],
]


async def test_a_malformed_traceparent_is_ignored_a_new_trace_and_no_error(
    tmp_path: Path,
) -> None:
    async with traced(tmp_path) as (rig, receiver):
        ids = []
        for headers in MALFORMED:
            r = await rig.gateway.client.post(
                "/v1/chat/completions",
                json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
                headers=httpx.Headers([(b"authorization", f"Bearer {rig.key}".encode()), *headers]),
            )
            assert r.status_code == 200, (headers, r.text)
            ids.append(r.headers["x-request-id"])
        # A hostile tracestate beside a valid parent: the parent is kept, the state dropped.
        huge = await rig.gateway.client.post(
            "/v1/chat/completions",
            json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
            headers={
                **rig.gateway.auth(rig.key),
                "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
                "tracestate": "k=" + "v" * 8000,
            },
        )
        assert huge.status_code == 200
        sent = upstream_headers(rig)
        traces = [await trace_of(rig, receiver, request_id) for request_id in ids]
        kept = await trace_of(rig, receiver, huge.headers["x-request-id"])

    seen = set()
    for headers, spans in zip(MALFORMED, traces, strict=True):
        server = one(spans, "POST /v1/chat/completions")
        assert server.parent_span_id == "" and server.trace_id != TRACE_ID, headers
        assert server.trace_id not in seen  # each its own new trace
        seen.add(server.trace_id)
    assert one(kept, "POST /v1/chat/completions").parent_span_id == PARENT_ID
    assert "tracestate" not in sent


async def test_a_sample_ratio_of_zero_exports_nothing_but_a_sampled_parent_is_followed(
    tmp_path: Path,
) -> None:
    async with traced(tmp_path, sample_ratio=0.0) as (rig, receiver):
        body = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(5):
            assert (await rig.chat(body)).status_code == 200
        assert (await rig.gateway.client.get("/v1/models", headers=rig.gateway.auth())).is_success
        followed = await rig.gateway.client.post(
            "/v1/chat/completions",
            json=body,
            headers={**rig.gateway.auth(rig.key), "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
        )
        spans = await trace_of(rig, receiver, followed.headers["x-request-id"])
        every = receiver.spans()
    assert {s.trace_id for s in every} == {TRACE_ID}  # the five and the list: nothing
    assert one(spans, "POST /v1/chat/completions").parent_span_id == PARENT_ID


async def test_a_stream_is_traced_its_span_ending_with_the_stream(tmp_path: Path) -> None:
    async with traced(tmp_path) as (rig, receiver):
        r = await rig.chat(
            {
                "model": "small",
                "messages": [{"role": "user", "content": "tell me a story"}],
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )
        assert r.status_code == 200, r.text
        usage = chunks(r.text)[-1]["usage"]
        reasons = [c["choices"][0]["finish_reason"] for c in chunks(r.text) if c["choices"]]
        spans = await trace_of(rig, receiver, r.headers["x-request-id"])
        sent = upstream_headers(rig)

    server = one(spans, "POST /v1/chat/completions")
    upstream = one(spans, "chat sim-small")
    settle = one(spans, "settle")
    assert upstream.parent_span_id == settle.parent_span_id == server.span_id
    assert server.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"] > 0
    assert upstream.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert upstream.attributes["gen_ai.response.finish_reasons"] == [reasons[-1]]
    first_byte = upstream.events[0]
    assert first_byte.name == "gen_ai.first_byte"
    assert upstream.start_ns <= first_byte.time_ns <= upstream.end_ns
    # The request's span covers the whole stream: the charge is made after the last frame.
    assert settle.end_ns <= server.end_ns and upstream.end_ns <= server.end_ns
    assert sampled(sent["traceparent"]) == (server.trace_id, upstream.span_id)


async def test_errors_mark_their_spans(tmp_path: Path) -> None:
    async with traced(tmp_path) as (rig, receiver):
        body = {"model": "gone", "messages": [{"role": "user", "content": "hi"}]}
        down = await rig.chat(body)  # its provider refuses connections
        assert down.status_code >= 500
        refused = await rig.gateway.client.post(
            "/v1/chat/completions", json=body, headers={"authorization": "Bearer nope"}
        )
        assert refused.status_code == 401
        down_spans = await trace_of(rig, receiver, down.headers["x-request-id"])
        refused_spans = await trace_of(rig, receiver, refused.headers["x-request-id"])

    server = one(down_spans, "POST /v1/chat/completions")
    code = down.json()["error"]["code"]
    assert server.status_code == STATUS_ERROR and server.status_message == code
    assert server.attributes["error.type"] == code
    upstream = one(down_spans, "chat gone")
    assert upstream.status_code == STATUS_ERROR
    assert "settle" not in {s.name for s in down_spans}  # nothing charged
    # A 4xx is the client's: noted on the request's span, the failed step marked.
    server = one(refused_spans, "POST /v1/chat/completions")
    assert server.status_code != STATUS_ERROR
    assert server.attributes["error.type"] == refused.json()["error"]["code"]
    auth = one(refused_spans, "auth")
    assert auth.status_code == STATUS_ERROR


@pytest.fixture
def log_lines() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """(access lines, application lines), as the gateway writes them."""
    root, access = logging.getLogger(), logging.getLogger("gateway.access")
    saved = (root.handlers[:], root.level, access.handlers[:], access.propagate)
    stdout, stderr = io.StringIO(), io.StringIO()
    setup_logging("INFO", stdout=stdout, stderr=stderr)
    try:
        yield stdout, stderr
    finally:
        logging.captureWarnings(False)
        root.handlers[:], access.handlers[:] = saved[0], saved[2]
        root.setLevel(saved[1])
        access.propagate = saved[3]


async def test_log_lines_carry_the_requests_trace_and_span_ids(
    tmp_path: Path, log_lines: tuple[io.StringIO, io.StringIO]
) -> None:
    async with traced(tmp_path) as (rig, receiver):
        r = await rig.chat({"model": "small", "messages": [{"role": "user", "content": "hi"}]})
        spans = await trace_of(rig, receiver, r.headers["x-request-id"])
        # An application line inside a request: a key refused by the provider is logged.
        down = await rig.chat({"model": "gone", "messages": [{"role": "user", "content": "x"}]})
        down_spans = await trace_of(rig, receiver, down.headers["x-request-id"])
    server = one(spans, "POST /v1/chat/completions")
    lines = [json.loads(line) for line in log_lines[0].getvalue().splitlines()]
    access = [e for e in lines if e.get("request_id") == r.headers["x-request-id"]]
    assert access and all(e["logger"] == "gateway.access" for e in access)
    assert access[0]["trace_id"] == server.trace_id
    assert access[0]["span_id"] == server.span_id
    # Lines of other requests (the rig's own set-up calls) have their own trace ids.
    others = [e for e in lines if e.get("request_id") not in (None, r.headers["x-request-id"])]
    assert others and all(e["trace_id"] not in (None, server.trace_id) for e in others)
    down_server = one(down_spans, "POST /v1/chat/completions")
    application = [json.loads(line) for line in log_lines[1].getvalue().splitlines()]
    failed = [e for e in application if e["request_id"] == down.headers["x-request-id"]]
    assert failed and failed[0]["message"].startswith("upstream failed on POST")
    assert (failed[0]["trace_id"], failed[0]["span_id"]) == (
        down_server.trace_id,
        down_server.span_id,
    )
    # Lines outside requests (start-up, background actors) have none.
    outside = [e for e in application if e["request_id"] is None]
    assert outside and all(e["trace_id"] is None and e["span_id"] is None for e in outside)


_OFF_SCRIPT = """
import sys, trio
from pathlib import Path
from tests.harness import gateway_config, running_gateway

async def main(tmp):
    config = gateway_config(f"sqlite:///{tmp}/gateway.db", Path(tmp))
    assert config.telemetry.otlp_endpoint is None
    async with running_gateway(config) as gw:
        assert gw.runtime.tracing is None
        r = await gw.client.get("/v1/keys", headers=gw.auth())
        assert r.status_code == 200, r.text
    print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))

trio.run(main, sys.argv[1])
"""


def test_with_telemetry_off_the_sdk_is_never_imported(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", _OFF_SCRIPT, str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_hostile_trace_headers_never_raise_and_only_a_w3c_parent_is_taken() -> None:
    from opentelemetry.trace import get_current_span

    from gateway.telemetry.tracing import incoming_context

    valid = f"00-{TRACE_ID}-{PARENT_ID}-01".encode()
    rng = random.Random(25)
    alphabet = b"0123456789abcdefABCDEF- \t,=\x00\xff\r\n"
    cases: list[list[tuple[bytes, bytes]]] = [[], [(b"tracestate", b"a=b")]]
    for _ in range(3000):
        mutated = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            where = rng.randrange(len(mutated) + 1)
            action = rng.randrange(3)
            if action == 0 and where < len(mutated):
                mutated[where] = rng.choice(alphabet)
            elif action == 1:
                mutated[where:where] = bytes([rng.choice(alphabet)])
            elif where < len(mutated):
                del mutated[where]
        state = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 64)))
        cases.append([(b"traceparent", bytes(mutated)), (b"tracestate", state)])
        cases.append([(b"traceparent", bytes(rng.randrange(256) for _ in range(55)))])
    # W3C: a later version's traceparent is read for its first four fields (and may go on).
    pattern = re.compile(rb"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
    taken = 0
    for headers in cases:
        context = get_current_span(incoming_context(headers)).get_span_context()
        if context.is_valid:
            taken += 1
            match = pattern.fullmatch(headers[0][1].strip(b" \t"))
            assert match is not None, headers
            version, tail = match.group(1), match.group(5)
            assert version != b"ff" and not (version == b"00" and tail), headers
            assert f"{context.trace_id:032x}" == match.group(2).decode()
            assert context.trace_id != 0 and context.span_id != 0
    assert 0 < taken < len(cases)  # some mutations leave it valid (a flags digit), most not
    assert not get_current_span(incoming_context(None)).get_span_context().is_valid


@pytest.mark.parametrize(
    ("table", "key", "problem"),
    [
        ("sample_ratio = 0.5", "telemetry.sample_ratio", "applies only with otlp_endpoint"),
        ('otlp_endpoint = "grpc://x:4317"', "telemetry.otlp_endpoint", "http:// or https://"),
        ('otlp_endpoint = "http://x:4318"\nsample_ratio = 1.5', "telemetry.sample_ratio", "1"),
        ('otlp_endpoint = "http://x:4318"\nsample_ratio = -0.1', "telemetry.sample_ratio", "0"),
        ('otlp_endpoint = "http://x:4318"\nsample_ratio = nan', "telemetry.sample_ratio", "nan"),
        ('otlp_endpoint = "http://x:4318"\nsample_ratio = "1"', "telemetry.sample_ratio", "1"),
        ('otlp_endpoint = "http://x:4318"\nratio = 1', "telemetry.ratio", "unknown key"),
        ('otlp_endpoint = "http://x:4318"\nexport_delay_s = 0', "telemetry.export_delay_s", "0"),
        (
            'otlp_endpoint = "http://x:4318"\nmax_queue_size = 10',
            "telemetry.max_export_batch_size",
            "must not be more than max_queue_size",
        ),
    ],
)
def test_a_bad_telemetry_table_fails_at_start_naming_the_key(
    tmp_path: Path, table: str, key: str, problem: str
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f"[telemetry]\n{table}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.key == key and problem in caught.value.problem, str(caught.value)


def test_telemetry_is_off_by_default_and_the_endpoint_gets_the_traces_path(
    tmp_path: Path,
) -> None:
    assert load_config(None, environ={}).telemetry.otlp_endpoint is None
    path = tmp_path / "gateway.toml"
    for given, url in [
        ("http://collector:4318", "http://collector:4318/v1/traces"),
        ("http://collector:4318/", "http://collector:4318/v1/traces"),
        ("https://otel.example/prefix", "https://otel.example/prefix/v1/traces"),
        ("http://collector:4318/v1/traces", "http://collector:4318/v1/traces"),
    ]:
        path.write_text(f'[telemetry]\notlp_endpoint = "{given}"\n')
        telemetry = load_config(path, environ={}).telemetry
        assert telemetry.traces_url == url and telemetry.sample_ratio == 1.0


async def test_each_worker_exports_its_own_spans_and_flushes_them_at_shutdown(
    tmp_path: Path,
) -> None:
    from tests.gateway.test_cli import _env, _gateway, _start, _stop

    async with otlp_receiver() as receiver:
        config = tmp_path / "gateway.toml"
        config.write_text(
            "[server]\naccess_log = false\n"
            # Nothing is sent before the shutdown: only its flush can deliver the spans.
            f'[telemetry]\notlp_endpoint = "{receiver.url}"\nexport_delay_s = 3600\n'
        )
        args = _gateway("serve", "--workers", "2", "--config", str(config))
        process, url = await _start(args, _env(tmp_path, PYTHONPATH=str(REPO)), tmp_path)
        try:
            # A new connection per request, so that SO_REUSEPORT spreads them over both workers
            async with httpx.AsyncClient(base_url=url, headers={"Connection": "close"}) as client:
                ids = [(await client.get("/livez")).headers["x-request-id"] for _ in range(40)]
            assert receiver.spans() == []
        finally:
            assert await _stop(process) == 0
        spans = [s for s in receiver.spans() if s.name == "GET /livez"]
    assert sorted(s.attributes["gateway.request_id"] for s in spans) == sorted(ids)
    assert len({s.resource["service.instance.id"] for s in spans}) == 2  # two providers


async def test_embeddings_are_traced_as_their_operation(tmp_path: Path) -> None:
    async with traced(tmp_path) as (rig, receiver):
        r = await rig.gateway.client.post(
            "/v1/embeddings",
            json={"model": "embed", "input": "hello"},
            headers=rig.gateway.auth(rig.key),
        )
        assert r.status_code == 200, r.text
        spans = await trace_of(rig, receiver, r.headers["x-request-id"])
        sent = [q for q in rig.upstream.requests if q.path.endswith("/embeddings")][-1].headers
    server = one(spans, "POST /v1/embeddings")
    assert server.attributes["gen_ai.operation.name"] == "embeddings"
    assert server.attributes["gen_ai.usage.input_tokens"] == r.json()["usage"]["prompt_tokens"]
    upstream = one(spans, "embeddings sim-embed")
    assert upstream.kind == CLIENT and upstream.parent_span_id == server.span_id
    assert sampled(sent["traceparent"]) == (server.trace_id, upstream.span_id)


async def test_a_collector_that_is_down_costs_spans_never_requests(tmp_path: Path) -> None:
    async with fresh_database_url("sqlite", tmp_path) as url:
        toml = """
[telemetry]
otlp_endpoint = "http://127.0.0.1:1"
export_delay_s = 0.01
export_timeout_s = 0.5
"""
        with trio.fail_after(30):  # the shutdown's last export gives up within its timeout
            async with inference_rig(url, tmp_path, extra_toml=toml) as rig:
                for stream in (False, True, False):
                    r = await rig.chat(
                        {
                            "model": "small",
                            "messages": [{"role": "user", "content": "hi"}],
                            "stream": stream,
                        }
                    )
                    assert r.status_code == 200, r.text
                    assert "traceparent" in upstream_headers(rig)


async def test_an_unknown_method_or_path_names_no_new_span(tmp_path: Path) -> None:
    async with traced(tmp_path) as (rig, receiver):
        odd = await rig.gateway.client.request("PROPFIND", "/v1/chat/completions")
        lost = await rig.gateway.client.get(f"/v1/nothing/{'x' * 50}")
        assert odd.status_code >= 400 and lost.status_code == 404
        odd_spans = await trace_of(rig, receiver, odd.headers["x-request-id"])
        lost_spans = await trace_of(rig, receiver, lost.headers["x-request-id"])
    server = one(odd_spans, "_OTHER")  # not routed (405): the method alone
    assert server.attributes["http.request.method"] == "_OTHER"
    assert server.attributes["http.request.method_original"] == "PROPFIND"
    server = one(lost_spans, "GET")  # no route: the method alone, the path as an attribute
    assert "http.route" not in server.attributes
    assert server.attributes["url.path"] == f"/v1/nothing/{'x' * 50}"


@pytest.mark.parametrize("stream", [False, True])
async def test_an_anthropic_upstream_is_named_by_its_conventions(
    tmp_path: Path, stream: bool
) -> None:
    async with traced(tmp_path) as (rig, receiver):
        r = await rig.chat(
            {"model": "haiku", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
        )
        assert r.status_code == 200, r.text
        spans = await trace_of(rig, receiver, r.headers["x-request-id"])
        sent = [q for q in rig.upstream.requests if q.path.endswith("/messages")][-1].headers
    if stream:
        reason = [c["choices"][0]["finish_reason"] for c in chunks(r.text) if c["choices"]][-1]
    else:
        reason = r.json()["choices"][0]["finish_reason"]
    upstream = one(spans, "chat claude-haiku")
    assert upstream.attributes["gen_ai.provider.name"] == "anthropic"
    assert upstream.attributes["gen_ai.response.finish_reasons"] == [reason]
    assert upstream.attributes["gen_ai.usage.output_tokens"] > 0
    assert sampled(sent["traceparent"]) == (upstream.trace_id, upstream.span_id)


async def test_the_sdks_own_off_switch_sends_no_invalid_traceparent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")  # the SDK hands out non-recording spans
    async with traced(tmp_path) as (rig, receiver):
        r = await rig.chat({"model": "small", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        await flushed(rig.gateway.runtime.tracing)
        assert "traceparent" not in upstream_headers(rig)
        assert receiver.spans() == []


async def test_an_unsampled_request_sends_its_own_unsampled_traceparent_on_every_route(
    tmp_path: Path, log_lines: tuple[io.StringIO, io.StringIO]
) -> None:
    """At ratio 0 no SDK span is made, yet each request has ids of its own: on its log lines
    and in the `traceparent` (unsampled) its upstream calls get, a stream's relay included."""
    async with traced(tmp_path, sample_ratio=0.0) as (rig, receiver):
        body: dict[str, Any] = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
        answered = []
        for stream in (False, True, False):
            r = await rig.chat({**body, "stream": stream})
            assert r.status_code == 200, r.text
            answered.append((r.headers["x-request-id"], upstream_headers(rig)))
        await flushed(rig.gateway.runtime.tracing)
        assert receiver.spans() == []
    lines = [json.loads(line) for line in log_lines[0].getvalue().splitlines()]
    seen = set()
    for request_id, sent in answered:
        assert "tracestate" not in sent
        version, trace_id, span_id, flags = sent["traceparent"].split("-")
        assert version == "00" and flags == "02"  # unsampled; W3C level 2's random ids
        assert re.fullmatch("[0-9a-f]{32}", trace_id) and int(trace_id, 16) != 0
        assert re.fullmatch("[0-9a-f]{16}", span_id) and int(span_id, 16) != 0
        assert trace_id not in seen  # a new trace for each
        seen.add(trace_id)
        access = [e for e in lines if e.get("request_id") == request_id]
        assert access and (access[0]["trace_id"], access[0]["span_id"]) == (trace_id, span_id)


async def test_an_unsampled_parent_keeps_its_trace_and_tracestate_upstream(
    tmp_path: Path,
) -> None:
    async with traced(tmp_path, sample_ratio=1.0) as (rig, receiver):
        r = await rig.gateway.client.post(
            "/v1/chat/completions",
            json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
            headers={
                **rig.gateway.auth(rig.key),
                "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00",
                "tracestate": "vendor=opaque,other=1",
            },
        )
        assert r.status_code == 200, r.text
        sent = upstream_headers(rig)
        await flushed(rig.gateway.runtime.tracing)
        # A ratio of 1 does not override the parent's choice (the rig's own calls are traced).
        assert receiver.trace(TRACE_ID) == []
    version, trace_id, span_id, flags = sent["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "00")
    assert span_id not in (PARENT_ID, "0" * 16)
    assert sent["tracestate"] == "vendor=opaque,other=1"


def test_the_sampling_decision_honours_the_ratio_and_the_parents_flag() -> None:
    from opentelemetry.trace import SpanContext, TraceFlags

    from gateway.telemetry.tracing import SampleDecision

    parents = {
        flag: SpanContext(int(TRACE_ID, 16), int(PARENT_ID, 16), True, TraceFlags(flag))
        for flag in (TraceFlags.DEFAULT, TraceFlags.SAMPLED)
    }
    draws = 20_000
    for ratio in (0.0, 0.01, 0.1, 0.5, 1.0):
        decide = SampleDecision(ratio, random.Random(25))
        taken = sum(decide(None) for _ in range(draws))
        # Binomial: within 5 standard deviations (exact at 0 and 1).
        assert abs(taken - ratio * draws) <= 5 * (draws * ratio * (1 - ratio)) ** 0.5, ratio
        # A valid parent's flag decides, whatever the ratio.
        assert decide(parents[TraceFlags.SAMPLED]) is True
        assert decide(parents[TraceFlags.DEFAULT]) is False
    # Seeded, the same decisions: the ratio alone does not make them.
    first = SampleDecision(0.3, random.Random(7))
    again = SampleDecision(0.3, random.Random(7))
    assert [first(None) for _ in range(500)] == [again(None) for _ in range(500)]
    # Ids of unsampled requests are never all-zero, even when the generator draws 0.
    zero = SampleDecision(0.0, random.Random(1))
    zero._random.getrandbits = lambda bits: 0  # type: ignore[method-assign]
    assert zero.new_id(128) == 1 and zero.new_id(64) == 1
