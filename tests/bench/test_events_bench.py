"""`gateway bench events`: its arguments, the sampled gateways' config, the summary line and
one short run of both sides."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.cli import _parser, main
from bench.report import Row, events_overhead
from bench.suite import gateway_config
from gateway.config import load_config
from tests.bench.test_report import result


def test_events_arguments_and_defaults() -> None:
    args = _parser().parse_args(["events"])
    assert (args.command, args.concurrency, args.duration, args.warmup, args.out) == (
        "events",
        (64,),
        10.0,
        0.5,
        None,
    )
    args = _parser().parse_args(["events", "--concurrency", "8", "--duration", "2", "--out", "o"])
    assert (args.concurrency, args.duration, args.out) == ((8,), 2.0, Path("o"))


@pytest.mark.parametrize("rate", [None, 0.0, 1.0])
def test_the_bench_config_sets_the_sample_rate_only_when_asked(
    tmp_path: Path, rate: float | None
) -> None:
    text = gateway_config(
        "http://127.0.0.1:9/v1", max_connections=8, keepalive=8, success_sample_rate=rate
    )
    assert ("[webhooks]" in text) is (rate is not None)
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    config = load_config(path, environ={"GATEWAY_DATA_DIR": str(tmp_path)})
    expected = 0.1 if rate is None else rate  # 0.1: the default
    assert config.webhooks.completion_success_sample_rate == expected
    assert config.billing.enabled


def row(name: str, stream: bool, n: int, cpu: float) -> Row:
    r = Row.from_result(result(stream, 64, [1.0] * n), scenario=name)
    return replace(r, gateway_cpu_us_per_req=cpu)


def test_events_overhead_compares_all_with_none_per_mode() -> None:
    rows = [
        row("events-all", False, 9, 220.0),
        row("events-none", False, 10, 200.0),
        row("events-none", False, 10, 200.0),  # round 2, "none" first
        row("events-all", False, 9, 220.0),
    ]
    assert events_overhead(rows) == (
        "json at concurrency 64: success sampling 1.0 uses 1.10x the CPU per request of"
        " sampling 0; throughput 0.90x\n"
    )


@pytest.mark.filterwarnings("ignore:fewer than 2 CPUs")
def test_events_runs_both_sides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both gateways for real (a few seconds), two rounds each side first once."""
    argv = ["events", "--concurrency", "2", "--duration", "0.5", "--warmup", "0.2"]
    argv += ["--no-progress", "--out", str(tmp_path)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    table = [line.split()[:3] for line in lines[2:10]]
    assert table == [
        ["events-all", "json", "2"],
        ["events-none", "json", "2"],
        ["events-all", "sse", "2"],
        ["events-none", "sse", "2"],
        ["events-none", "json", "2"],
        ["events-all", "json", "2"],
        ["events-none", "sse", "2"],
        ["events-all", "sse", "2"],
    ]
    assert lines[10].startswith("json at concurrency 2: success sampling 1.0 uses ")
    assert lines[11].startswith("sse at concurrency 2: success sampling 1.0 uses ")
    assert (tmp_path / "bench.csv").exists()
