"""`gateway admin management-keys create|list|revoke ORG [KEY_ID]` as operators run it (real
processes, on every storage backend), and GATEWAY_BOOTSTRAP_MANAGEMENT_KEY on a database that
already has it, a new value, or an old one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx
import trio

from tests.gateway.test_cli import _env, _gateway, _run, _start, _stop, _url_of
from tests.gateway.test_metrics_workers import ROOT, drain
from tests.waiting import wait_until_async

BOOTSTRAP_A = "service_mgmt_bootstrap-value-a-0123456789"
BOOTSTRAP_B = "service_mgmt_bootstrap-value-b-0123456789"


def env_for(tmp_path: Path, database_url: str, bootstrap: str | None = None) -> dict[str, str]:
    env = _env(tmp_path, GATEWAY_DATABASE_URL=database_url, PYTHONPATH=str(ROOT))
    env.pop("GATEWAY_BOOTSTRAP_MANAGEMENT_KEY")
    if bootstrap is not None:
        env["GATEWAY_BOOTSTRAP_MANAGEMENT_KEY"] = bootstrap
    return env


async def cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return await _run(_gateway("admin", *args), env, cwd)


def shown_key(stdout: bytes) -> str:
    return stdout.decode().split("(shown once): ", 1)[1].split()[0]


def key_id(stdout: bytes) -> str:
    found = re.search(r"\bmk_[0-9A-Za-z]+", stdout.decode())
    assert found, stdout
    return found.group(0)


async def status(client: httpx.AsyncClient, key: str) -> int:
    r = await client.get("/v1/keys", headers={"Authorization": f"Bearer {key}"})
    return r.status_code


async def test_create_list_revoke(database_url: str, tmp_path: Path) -> None:
    env = env_for(tmp_path, database_url)
    created_org = await cli(env, tmp_path, "create-org", "umbrella")
    assert created_org.returncode == 0, created_org.stderr
    first = shown_key(created_org.stdout)

    made = await cli(env, tmp_path, "management-keys", "create", "umbrella")
    assert made.returncode == 0, made.stderr
    second, second_id = shown_key(made.stdout), key_id(made.stdout)
    assert second.startswith("service_mgmt_") and second != first

    listed = await cli(env, tmp_path, "management-keys", "list", "umbrella")
    assert listed.returncode == 0, listed.stderr
    text = listed.stdout.decode()
    assert second_id in text and text.count("mk_") == 2
    assert first not in text and second not in text  # never the secret
    assert second[:16] in text  # its prefix
    assert "never" in text  # last used

    process, url = await _start(_gateway("serve"), env, tmp_path)
    try:
        async with trio.open_nursery() as nursery, httpx.AsyncClient(base_url=url) as client:
            assert process.stdout is not None
            nursery.start_soon(drain, process.stdout)
            assert await status(client, second) == 200
            assert await status(client, first) == 200
            revoked = await cli(env, tmp_path, "management-keys", "revoke", "umbrella", second_id)
            assert revoked.returncode == 0, revoked.stderr

            # The running server stops accepting it within its credential poll (a second).
            async def refused() -> bool:
                return await status(client, second) == 401

            await wait_until_async(refused, limit_s=5)
            assert await status(client, first) == 200
            nursery.cancel_scope.cancel()
    finally:
        assert await _stop(process) == 0

    listed = await cli(env, tmp_path, "management-keys", "list", "umbrella")
    line = next(ln for ln in listed.stdout.decode().splitlines() if second_id in ln)
    assert "revoked" in line and "never" not in line, line  # its use was recorded

    again = await cli(env, tmp_path, "management-keys", "revoke", "umbrella", second_id)
    assert again.returncode == 0 and b"already revoked" in again.stdout
    first_id = next(
        m for m in re.findall(r"\bmk_[0-9A-Za-z]+", listed.stdout.decode()) if m != second_id
    )
    last = await cli(env, tmp_path, "management-keys", "revoke", "umbrella", first_id)
    assert last.returncode == 1 and b"last active" in last.stderr
    unknown = await cli(env, tmp_path, "management-keys", "revoke", "umbrella", "mk_nope")
    assert unknown.returncode == 1 and b"mk_nope" in unknown.stderr
    nobody = await cli(env, tmp_path, "management-keys", "list", "nobody")
    assert nobody.returncode == 1 and b"no organization" in nobody.stderr


async def test_bootstrap_key_changes_on_an_existing_database(
    database_url: str, tmp_path: Path
) -> None:
    """A new value revokes the previous bootstrap key; an old value that comes back stays
    revoked (with a warning) and revokes nothing; other keys of `default` are untouched."""

    async def serve_once(bootstrap: str) -> tuple[dict[str, int], str]:
        env = env_for(tmp_path, database_url, bootstrap)
        err = tmp_path / "stderr"
        with err.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                _gateway("serve"), env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=stderr
            )
        url = await _url_of(process)
        try:
            async with httpx.AsyncClient(base_url=url) as client:
                seen = {k: await status(client, k) for k in (BOOTSTRAP_A, BOOTSTRAP_B, other)}
        finally:
            assert await _stop(process) == 0
        return seen, err.read_text()

    env = env_for(tmp_path, database_url, BOOTSTRAP_A)
    assert (await _run(_gateway("migrate"), env, tmp_path)).returncode == 0
    other = "service_mgmt_not-created-yet-0123456789"
    seen, _ = await serve_once(BOOTSTRAP_A)
    assert seen[BOOTSTRAP_A] == 200 and seen[BOOTSTRAP_B] == 401
    made = await cli(env, tmp_path, "management-keys", "create", "default")
    other = shown_key(made.stdout)

    seen, _ = await serve_once(BOOTSTRAP_B)
    assert seen == {BOOTSTRAP_A: 401, BOOTSTRAP_B: 200, other: 200}

    seen, log = await serve_once(BOOTSTRAP_A)
    assert seen == {BOOTSTRAP_A: 401, BOOTSTRAP_B: 200, other: 200}
    assert "GATEWAY_BOOTSTRAP_MANAGEMENT_KEY" in log and "revoked" in log, log
    assert BOOTSTRAP_A not in log
