"""The commands the deployment files run, run here for real: the Dockerfile's HEALTHCHECK
against a real `gateway serve` (only the port differs, through GATEWAY_PORT as in the image),
and the migration command every file uses against a fresh database, with the environment the
Helm Job gives it. No container runs here: the image's Python is this venv's."""

from __future__ import annotations

import re
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from tests.backends import BACKENDS, fresh_database_url
from tests.deploy.artifacts import (
    chart,
    compose,
    dockerfile_env,
    dockerfile_exec,
    systemd_unit,
)
from tests.gateway.test_cli import _env, _run, _start, _stop

GATEWAY = str(Path(sys.executable).parent / "gateway")  # the console script, as in the image


def _healthcheck() -> list[str]:
    """The HEALTHCHECK's argv, run by this Python (the image's is `python` on its PATH)."""
    argv = dockerfile_exec("HEALTHCHECK")
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1].rstrip("/")


def test_every_file_runs_the_same_two_commands() -> None:
    entrypoint = dockerfile_exec("ENTRYPOINT")
    services = compose()["services"]
    job, deployment = (
        next(d for d in chart().documents() if d["kind"] == kind) for kind in ("Job", "Deployment")
    )
    pod = deployment["spec"]["template"]["spec"]["containers"][0]
    migrate_pod = job["spec"]["template"]["spec"]["containers"][0]
    migrations = [
        entrypoint + services["migrate"]["command"],
        entrypoint + migrate_pod["args"],
        _exec_start("gateway-migrate.service"),
    ]
    servers = [
        entrypoint + dockerfile_exec("CMD"),
        entrypoint + services["gateway-1"]["command"],
        entrypoint + pod["args"],
        _exec_start("gateway.service"),
    ]
    assert migrations == [["gateway", "migrate"]] * 3
    assert servers == [["gateway", "serve"]] * 4


def _exec_start(unit: str) -> list[str]:
    command, *args = systemd_unit(unit)["Service"]["ExecStart"].split()
    return [Path(command).name, *args]


async def test_the_healthcheck_passes_while_serving_and_fails_once_stopped(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path)
    process, url = await _start([GATEWAY, "serve"], env, tmp_path)
    probe_env = {**env, "GATEWAY_PORT": _port(url)}
    try:
        healthy = await _run(_healthcheck(), probe_env, tmp_path)
        assert healthy.returncode == 0, healthy.stderr
    finally:
        assert await _stop(process) == 0
    down = await _run(_healthcheck(), probe_env, tmp_path)
    assert down.returncode != 0 and b"Connection refused" in down.stderr


async def test_the_healthcheck_fails_on_a_503(tmp_path: Path) -> None:
    """What /healthz answers while draining or broken (a stand-in server: the real one
    answers 503 only in states this test cannot cheaply reach)."""

    async def not_ready(stream: trio.SocketStream) -> None:
        await stream.receive_some()
        body = b'{"error":{"code":"not_ready"}}'
        head = f"HTTP/1.1 503 Service Unavailable\r\ncontent-length: {len(body)}\r\n"
        await stream.send_all(head.encode() + b"connection: close\r\n\r\n" + body)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, not_ready, 0, host="127.0.0.1"))
        port = str(listener.socket.getsockname()[1])
        result = await _run(_healthcheck(), {**_env(tmp_path), "GATEWAY_PORT": port}, tmp_path)
        nursery.cancel_scope.cancel()
    assert result.returncode != 0 and b"HTTP Error 503" in result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_migration_command_prepares_a_database_the_gateway_serves(
    backend: str, tmp_path: Path
) -> None:
    """`gateway migrate` with exactly the Helm Job's variables (the database URL and a data
    dir; no config file), then `gateway serve` on the same database, healthy."""
    async with fresh_database_url(backend, tmp_path) as url:
        job_env = {k: v for k, v in _env(tmp_path).items() if not k.startswith("GATEWAY_")}
        job_env.update(GATEWAY_DATABASE_URL=url, GATEWAY_DATA_DIR=str(tmp_path / "job"))
        first = await _run([GATEWAY, "migrate"], job_env, tmp_path)
        assert first.returncode == 0, first.stderr
        assert b"applied 0001_foundation" in first.stdout
        again = await _run([GATEWAY, "migrate"], job_env, tmp_path)
        assert again.returncode == 0 and again.stdout.strip() == b"database is up to date"

        env = _env(tmp_path, GATEWAY_DATABASE_URL=url)
        process, served = await _start([GATEWAY, "serve"], env, tmp_path)
        try:
            probe = await _run(_healthcheck(), {**env, "GATEWAY_PORT": _port(served)}, tmp_path)
            assert probe.returncode == 0, probe.stderr
        finally:
            assert await _stop(process) == 0


def test_the_healthcheck_reads_the_image_port_and_needs_only_the_standard_library() -> None:
    code = dockerfile_exec("HEALTHCHECK")[-1]
    assert "os.environ.get('GATEWAY_PORT', '8080')" in code and "/healthz" in code
    assert dockerfile_env()["GATEWAY_PORT"] == "8080"
    imports = re.findall(r"import ([\w., ]+);", code)
    assert imports == ["os, urllib.request"]  # no curl, no third-party package
