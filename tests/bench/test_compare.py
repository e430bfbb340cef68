"""`gateway bench compare`: its arguments, the head-against-base summary and one short run."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench.cli import _parser, main
from bench.processes import ROOT
from bench.report import Row, head_against_base, side_by_side
from bench.revision import default_cache
from tests.bench.test_report import result


def test_compare_arguments_and_defaults() -> None:
    args = _parser().parse_args(["compare", "--base", "v1.2"])
    assert (args.command, args.base, args.concurrency, args.duration) == (
        "compare",
        "v1.2",
        64,
        10.0,
    )
    assert (args.warmup, args.out, args.base_python, args.cache) == (
        0.5,
        None,
        None,
        default_cache(),
    )
    args = _parser().parse_args(
        ["compare", "--base", "HEAD~3", "--concurrency", "8", "--duration", "2.5", "--warmup", "0"]
        + ["--out", "o", "--base-python", "/usr/bin/python3", "--cache", "c", "--no-progress"]
    )
    assert (args.concurrency, args.duration, args.warmup, args.out) == (8, 2.5, 0.0, Path("o"))
    assert (args.base_python, args.cache, args.no_progress) == ("/usr/bin/python3", Path("c"), True)


@pytest.mark.parametrize(
    "argv",
    [
        ["compare"],  # --base is required
        ["compare", "--base", "HEAD", "--concurrency", "0"],
        ["compare", "--base", "HEAD", "--concurrency", "8,64"],  # one concurrency
        ["compare", "--base", "HEAD", "--duration", "0"],
    ],
)
def test_compare_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(argv)
    assert exit_.value.code == 2
    assert "error" in capsys.readouterr().err


def row(name: str, stream: bool, n: int, cpu: float | None) -> Row:
    r = Row.from_result(result(stream, 64, [1.0] * n), scenario=name)  # n requests in 0.5 s
    return replace(r, gateway_cpu_us_per_req=cpu)


def test_head_against_base_takes_the_means_of_the_rounds() -> None:
    rows = [
        row("base", False, 10, 200.0),
        row("head", False, 9, 220.0),
        row("base", True, 8, 400.0),
        row("head", True, 8, 300.0),
        row("head", False, 11, 260.0),  # round 2, head first
        row("base", False, 10, 200.0),
        row("head", True, 6, 300.0),
        row("base", True, 8, 400.0),
    ]
    assert head_against_base(rows) == (
        "json at concurrency 64: head uses 1.20x the CPU per request of base; throughput 1.00x\n"
        "sse at concurrency 64: head uses 0.75x the CPU per request of base; throughput 0.88x\n"
    )


def test_side_by_side_leaves_out_what_it_cannot_compare() -> None:
    rows = [
        row("a", False, 10, 200.0),
        row("b", False, 10, None),  # no CPU reading: json not compared
        row("a", True, 10, 200.0),
        row("b", True, 0, 100.0),  # no throughput: sse not compared
        row("a", False, 10, 100.0),
    ]
    assert side_by_side(rows, "a", "b") == ""
    assert side_by_side(rows, "a", "c") == ""
    assert side_by_side(rows, "b", "a", labels=("B", "A")) == (
        "sse at concurrency 64: B uses 0.50x the CPU per request of A; throughput 0.00x\n"
    )


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
@pytest.mark.filterwarnings("ignore:fewer than 2 CPUs")
def test_compare_runs_head_against_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both sides for real (about 15 s): HEAD exported into the cache, run with this
    interpreter from there, and this tree beside it."""
    argv = ["compare", "--base", "HEAD", "--base-python", sys.executable, "--cache", str(tmp_path)]
    argv += ["--concurrency", "2", "--duration", "0.5", "--warmup", "0.2", "--no-progress"]
    argv += ["--out", str(tmp_path / "out")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    table = [line.split()[:3] for line in lines[2:10]]
    assert table == [
        ["base", "json", "2"],
        ["head", "json", "2"],
        ["base", "sse", "2"],
        ["head", "sse", "2"],
        ["head", "json", "2"],
        ["base", "json", "2"],
        ["head", "sse", "2"],
        ["base", "sse", "2"],
    ]
    assert lines[10].startswith("json at concurrency 2: head uses ")
    assert lines[11].startswith("sse at concurrency 2: head uses ")
    (src,) = tmp_path.glob("*/src")
    assert (
        lines[12] == f"base: HEAD = {src.parent.name}, gateway from {src}, python {sys.executable}"
    )
    assert lines[13].startswith(f"head: {src.parent.name}")
    assert lines[13].endswith(f"gateway from {ROOT}, python {sys.executable}")
    assert (tmp_path / "out" / "bench.csv").exists()
