"""`gateway bench tracing`: its arguments, its summary line and the stand-in collector."""

from __future__ import annotations

from functools import partial

import httpx
import pytest
import trio

from bench.cli import _parser
from bench.otlp_sink import OtlpSink, serve_otlp_sink
from bench.report import tracing_overhead
from tests.bench.test_compare import row


def test_tracing_arguments_and_defaults() -> None:
    args = _parser().parse_args(["tracing"])
    assert (args.command, args.concurrency, args.duration, args.sample_ratio) == (
        "tracing",
        (64,),
        10.0,
        1.0,
    )
    args = _parser().parse_args(["tracing", "--sample-ratio", "0.1", "--duration", "2"])
    assert (args.sample_ratio, args.duration) == (0.1, 2.0)


@pytest.mark.parametrize("ratio", ["-0.1", "1.5", "nan", "x"])
def test_a_sample_ratio_outside_0_to_1_is_refused(
    ratio: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(["tracing", "--sample-ratio", ratio])
    assert exit_.value.code == 2
    assert "error" in capsys.readouterr().err


def test_the_summary_compares_tracing_on_with_off() -> None:
    rows = [
        row("tracing-on", False, 100, 600.0),
        row("tracing-off", False, 200, 300.0),
        row("tracing-off", False, 200, 300.0),
        row("tracing-on", False, 100, 600.0),
    ]
    line = tracing_overhead(rows)
    assert "tracing on uses 2.00x the CPU per request of tracing off" in line
    assert "throughput 0.50x" in line


async def test_the_stand_in_collector_answers_and_counts_every_export() -> None:
    async with trio.open_nursery() as nursery:
        sink: OtlpSink = await nursery.start(partial(serve_otlp_sink))
        async with httpx.AsyncClient(base_url=sink.url) as client:
            for size in (0, 10, 100_000):
                r = await client.post(
                    "/v1/traces",
                    content=b"x" * size,
                    headers={"content-type": "application/x-protobuf"},
                )
                assert r.status_code == 200 and r.content == b""
        assert (sink.requests, sink.bytes) == (3, 100_010)
        nursery.cancel_scope.cancel()
