"""`python -m bench.upstream --fault ...`: the strict parser, and a process failing on command."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from bench.upstream import Faults
from bench.upstream.cli import parse_args
from bench.upstream.fault_spec import FaultSpecError, faults_from, parse_fault

ROOT = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"


def test_good_specs() -> None:
    assert parse_fault("sim-a:error_rate=1.0") == ("sim-a", {"error_rate": 1.0})
    assert parse_fault("sim-a:error_rate=0.25,error_status=503,every=2") == (
        "sim-a",
        {"error_rate": 0.25, "error_status": 503, "every": 2},
    )
    assert parse_fault("ft:base:org:stall") == ("ft:base:org", {"stall": True})
    assert parse_fault("m:stall=false,slow_first_byte_s=1.5") == (
        "m",
        {"stall": False, "slow_first_byte_s": 1.5},
    )
    assert parse_fault("m:rate_limit_rate=1,retry_after=7") == (
        "m",
        {"rate_limit_rate": 1.0, "retry_after": "7"},
    )
    assert parse_fault("m:reset_after_frames=0,error_frame_after=3,stall_after_frames=9")[1] == {
        "reset_after_frames": 0,
        "error_frame_after": 3,
        "stall_after_frames": 9,
    }


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("sim-a", "expected MODEL:SETTING=VALUE"),
        ("error_rate=1", "expected MODEL:SETTING=VALUE"),
        (":error_rate=1", "expected MODEL:SETTING=VALUE"),
        ("sim-a:", "no settings"),
        ("sim-a:bogus=1", "unknown setting 'bogus'"),
        ("sim-a:error_rate=lots", "error_rate must be a number from 0 to 1, not 'lots'"),
        ("sim-a:error_rate=nan", "error_rate must be a number"),
        ("sim-a:error_status=5o3", "error_status must be a 5xx status"),
        ("sim-a:every=-1", "every must be a whole number >= 1"),
        ("sim-a:reset_after_frames=1.5", "reset_after_frames must be a whole number"),
        ("sim-a:stall=yes", "stall must be true or false"),
        ("sim-a:retry_after=soon", "retry_after must be whole seconds"),
        ("sim-a:error_rate", "error_rate needs a value"),
        ("sim-a:every=2,every=3", "every given twice"),
        ("sim-a:every=2,", "unknown setting ''"),
        ("sim-a:slow_first_byte_s=inf", "slow_first_byte_s must be a number of seconds"),
    ],
)
def test_bad_specs(spec: str, says: str) -> None:
    with pytest.raises(FaultSpecError, match=says.replace("(", r"\(")):
        parse_fault(spec)


@pytest.mark.parametrize(
    ("specs", "says"),
    [
        (["a:error_rate=1.5"], "error_rate must be between 0 and 1"),
        (["a:error_rate=0.6,rate_limit_rate=0.6"], "must not exceed 1"),
        (["a:error_status=404"], "error_status must be a 5xx status"),
        (["a:every=0"], "every must be a whole number >= 1"),
        (["a:every=2", "a:every=3"], "a: every given twice"),
    ],
)
def test_out_of_range_or_repeated(specs: list[str], says: str) -> None:
    with pytest.raises(FaultSpecError, match=says):
        faults_from(parse_fault(spec) for spec in specs)


def test_options_for_one_model_add_up() -> None:
    args, behavior = parse_args(
        [
            "--fault",
            "a:error_rate=0.5",
            "--fault",
            "a:every=2",
            "--fault",
            "b:stall",
            "--fault-seed",
            "9",
        ]
    )
    assert behavior.faults == {"a": Faults(error_rate=0.5, every=2), "b": Faults(stall=True)}
    assert behavior.fault_seed == 9 and args.port == 9100
    assert parse_args([])[1].faults == {}


@pytest.mark.parametrize(
    "argv", [["--fault", "a:nope=1"], ["--fault", "a:error_rate=2"], ["--fault-seed", "x"]]
)
def test_a_bad_option_exits_2_naming_it(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert "argument --fault" in capsys.readouterr().err


def test_faults_check_their_values_when_built() -> None:
    with pytest.raises(ValueError, match="slow_first_byte_s"):
        Faults(slow_first_byte_s=-1)
    with pytest.raises(ValueError, match="retry_after"):
        Faults(retry_after="1\r\nx: y")


async def test_the_process_fails_one_model_on_command() -> None:
    command = [
        sys.executable,
        "-m",
        "bench.upstream",
        "--port",
        "0",
        "--fault",
        "sim-a:error_rate=1,error_status=502",
    ]
    process = await trio.lowlevel.open_process(command, cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        output = b""
        with trio.fail_after(30):
            while not output.endswith(b"\n"):
                piece = await process.stdout.receive_some()
                assert piece, f"exited early: {output!r}"
                output += piece
        url = output.decode().strip().rsplit(" ", 1)[-1]
        async with httpx.AsyncClient(base_url=url, headers={"authorization": "Bearer k"}) as c:
            for model, status in [("sim-a", 502), ("sim-b", 200), ("sim-a", 502)]:
                payload = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
                assert (await c.post(CHAT, json=payload)).status_code == status
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
