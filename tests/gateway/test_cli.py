"""The `gateway` command as operators run it: a real process, real signals, exit codes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

BOOTSTRAP = "service_mgmt_cli-test-bootstrap-key-0123456789"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        GATEWAY_DATA_DIR=str(tmp_path / "var"),
        GATEWAY_PORT="0",
        GATEWAY_BOOTSTRAP_MANAGEMENT_KEY=BOOTSTRAP,
        **extra,
    )
    return env


def _gateway(*args: str) -> list[str]:
    return [sys.executable, "-m", "gateway", *args]


async def _run(
    args: list[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            args, env=env, cwd=cwd, capture_stdout=True, capture_stderr=True, check=False
        )


async def _start(args: list[str], env: dict[str, str], cwd: Path) -> tuple[trio.Process, str]:
    """Start `gateway serve`, return the process and the URL it printed."""
    process = await trio.lowlevel.open_process(args, env=env, cwd=cwd, stdout=subprocess.PIPE)
    return process, await _url_of(process)


async def _url_of(process: trio.Process) -> str:
    """The URL a starting `gateway serve` prints on its stdout."""
    assert process.stdout is not None
    buffer = b""
    with trio.fail_after(60):
        while b"gateway listening on " not in buffer or not buffer.endswith(b"\n"):
            chunk = await process.stdout.receive_some()
            assert chunk, f"exited early: {buffer!r}"
            buffer += chunk
    line = next(ln for ln in buffer.decode().splitlines() if "gateway listening on" in ln)
    return line.rsplit(" ", 1)[-1]


async def _stop(process: trio.Process) -> int:
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(30):
        return await process.wait()


async def test_bad_config_file_exits_nonzero_naming_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    # Not `port`: _env sets GATEWAY_PORT, and a variable replaces the file's value unchecked.
    bad.write_text('[server]\nworkers = "two"\n')
    result = await _run(_gateway("serve", "--config", str(bad)), _env(tmp_path), tmp_path)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert str(bad) in err and "server.workers" in err and "Traceback" not in err


async def test_a_bad_operator_key_stops_serve_with_a_clear_message(tmp_path: Path) -> None:
    env = _env(tmp_path, GATEWAY_OPERATOR_KEY="service_mgmt_" + "k" * 40)
    result = await _run(_gateway("serve"), env, tmp_path)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert "GATEWAY_OPERATOR_KEY" in err and '"service_op_"' in err
    assert "k" * 40 not in err and "Traceback" not in err


async def test_unknown_key_in_config_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "typo.toml"
    bad.write_text(
        '[[providers]]\nname = "x"\nkind = "openai"\nbase_url = "http://h"\nmodles = 1\n'
    )
    result = await _run(_gateway("migrate", "--config", str(bad)), _env(tmp_path), tmp_path)
    assert result.returncode == 2
    assert "providers[0].modles" in result.stderr.decode()


async def test_migrate_is_idempotent_from_the_command_line(tmp_path: Path) -> None:
    env = _env(tmp_path)
    first = await _run(_gateway("migrate"), env, tmp_path)
    assert first.returncode == 0 and b"applied 0001_foundation" in first.stdout
    again = await _run(_gateway("migrate"), env, tmp_path)
    assert again.returncode == 0 and b"up to date" in again.stdout


async def test_create_org_prints_a_working_management_key_once(tmp_path: Path) -> None:
    env = _env(tmp_path)
    result = await _run(_gateway("admin", "create-org", "umbrella", "--plan", "pro"), env, tmp_path)
    assert result.returncode == 0, result.stderr
    key = result.stdout.decode().split("management key (shown once): ", 1)[1].split()[0]
    assert key.startswith("service_mgmt_")
    dup = await _run(_gateway("admin", "create-org", "umbrella"), env, tmp_path)
    assert dup.returncode == 1 and b"already exists" in dup.stderr
    process, url = await _start(_gateway("serve"), env, tmp_path)
    try:
        async with httpx.AsyncClient(base_url=url) as client:
            r = await client.get("/v1/keys", headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200
    finally:
        assert await _stop(process) == 0


async def test_grant_credits_writes_an_adjustment(tmp_path: Path) -> None:
    env = _env(tmp_path)
    created = await _run(_gateway("admin", "create-org", "umbrella"), env, tmp_path)
    key = created.stdout.decode().split("management key (shown once): ", 1)[1].split()[0]
    granted = await _run(
        _gateway("admin", "grant-credits", "umbrella", "12.5", "--note", "welcome"), env, tmp_path
    )
    assert granted.returncode == 0, granted.stderr
    assert b"balance: 12.500000 USD" in granted.stdout
    back = await _run(_gateway("admin", "grant-credits", "umbrella", "-2.5"), env, tmp_path)
    assert back.returncode == 0 and b"balance: 10.000000 USD" in back.stdout
    missing = await _run(_gateway("admin", "grant-credits", "nobody", "5"), env, tmp_path)
    assert missing.returncode == 1 and b"no organization" in missing.stderr
    zero = await _run(_gateway("admin", "grant-credits", "umbrella", "0"), env, tmp_path)
    assert zero.returncode == 2
    process, url = await _start(_gateway("serve"), env, tmp_path)
    try:
        async with httpx.AsyncClient(base_url=url) as client:
            r = await client.get(
                "/v1/credits/transactions", headers={"Authorization": f"Bearer {key}"}
            )
            rows = r.json()["data"]
            assert [(t["type"], t["amount_usd"]) for t in rows] == [
                ("adjustment", -2.5),
                ("adjustment", 12.5),
            ]
            assert rows[1]["description"] == "welcome"
    finally:
        assert await _stop(process) == 0


async def test_first_start_prints_a_management_key(tmp_path: Path) -> None:
    env = _env(tmp_path)
    del env["GATEWAY_BOOTSTRAP_MANAGEMENT_KEY"]
    process = await trio.lowlevel.open_process(
        _gateway("serve"), env=env, cwd=tmp_path, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    out = b""
    with trio.fail_after(60):
        while b"shown once" not in out:
            chunk = await process.stdout.receive_some()
            assert chunk, out
            out += chunk
    text = out.decode()
    assert "database: sqlite" in text and "providers: none configured" in text
    assert "service_mgmt_" in text
    assert await _stop(process) == 0


@pytest.mark.parametrize("workers", ["1", "2"])
async def test_serve_answers_and_sigterm_exits_zero(tmp_path: Path, workers: str) -> None:
    env = _env(tmp_path)
    process, url = await _start(_gateway("serve", "--workers", workers), env, tmp_path)
    try:
        # The parent prints its address once the workers are started, not yet serving: the
        # first request waits in the listen backlog while they import (seconds on a busy box).
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            health = await client.get("/healthz")
            assert health.status_code == 200
            auth = {"Authorization": f"Bearer {BOOTSTRAP}"}
            for i in range(6):  # spread over the workers' shared socket
                r = await client.post("/v1/keys", json={"name": f"k{i}"}, headers=auth)
                assert r.status_code == 200, r.text
            listed = await client.get("/v1/keys", headers=auth)
            assert listed.json()["total"] == 6
    finally:
        assert await _stop(process) == 0
