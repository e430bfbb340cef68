"""The compose deployment without containers: its services' commands and configuration run
here as processes on the test PostgreSQL, Redis and SeaweedFS. `migrate` once, then
`gateway-1` and `gateway-2` (two `gateway serve` on the same database, Redis and bucket), each
healthy by the Dockerfile's HEALTHCHECK; a file uploaded through one is read through the other.
Only addresses differ from compose.yaml (the services' host names are the test servers' ones).
nginx is not run (nothing here provides it)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import httpx
import pytest

from protocol.ids import random_token
from tests.backends import POSTGRES_URL, REDIS_URL, REQUIRE, fresh_database_url
from tests.deploy.artifacts import COMPOSE, compose, dockerfile_exec, env_example, interpolate
from tests.deploy.test_commands import GATEWAY, _healthcheck, _port
from tests.gateway.test_cli import BOOTSTRAP, _env, _run, _start, _stop
from tests.seaweedfs import SeaweedFS


def _require_backends() -> None:
    if POSTGRES_URL is None or REDIS_URL is None:
        reason = "needs GATEWAY_TEST_DATABASE_URL and GATEWAY_TEST_REDIS_URL"
        if REQUIRE:
            pytest.fail(f"GATEWAY_TEST_REQUIRE_BACKENDS=1: {reason}")
        pytest.skip(reason)


MASTER_KEY = base64.b64encode(os.urandom(32)).decode()  # .env's: the same for every service


def _compose_environment(
    database_url: str, server: SeaweedFS, config: Path, data_dir: Path
) -> dict[str, str]:
    """A gateway service's variables, from compose.yaml and .env.example, pointed here."""
    filled = env_example(COMPOSE / ".env.example")
    filled.update(
        POSTGRES_PASSWORD="unused",
        GATEWAY_MASTER_KEY=MASTER_KEY,
        GATEWAY_BOOTSTRAP_MANAGEMENT_KEY=BOOTSTRAP,
        AWS_ACCESS_KEY_ID=server.access_key_id,
        AWS_SECRET_ACCESS_KEY=server.secret_access_key,
    )
    declared = compose()["x-gateway"]["environment"]
    env = {name: interpolate(str(value), filled) for name, value in declared.items()}
    assert env["GATEWAY_DATABASE_URL"].startswith("postgresql://gateway:unused@postgres:5432/")
    assert env["GATEWAY_REDIS_URL"] == "redis://redis:6379/0"
    assert REDIS_URL is not None
    env.update(
        GATEWAY_DATABASE_URL=database_url,  # the addresses: the test servers'
        GATEWAY_REDIS_URL=REDIS_URL,
        GATEWAY_CONFIG=str(config),  # the same file, with the S3 endpoint's address
        GATEWAY_DATA_DIR=str(data_dir),  # the image's: /var/lib/gateway
    )
    return env


def _compose_config(tmp_path: Path, server: SeaweedFS) -> Path:
    text = (COMPOSE / "gateway.toml").read_text()
    assert 's3_endpoint_url = "http://seaweedfs:8333"' in text
    text = text.replace("http://seaweedfs:8333", server.endpoint_url)
    text = text.replace('"gateway-files"', f'"gw-{random_token(10).lower()}"')  # its own bucket
    config = tmp_path / "gateway.toml"
    config.write_text(text)
    return config


async def test_the_compose_services_run_on_real_backends(
    tmp_path: Path, seaweedfs: SeaweedFS
) -> None:
    _require_backends()
    services = compose()["services"]
    entrypoint = dockerfile_exec("ENTRYPOINT")
    assert entrypoint == ["gateway"]
    config = _compose_config(tmp_path, seaweedfs)
    async with fresh_database_url("postgresql", tmp_path) as database_url:
        base = {k: v for k, v in _env(tmp_path).items() if not k.startswith("GATEWAY_")}

        def env_of(service: str) -> dict[str, str]:
            own = _compose_environment(database_url, seaweedfs, config, tmp_path / service)
            return {**base, **own, "GATEWAY_HOST": "127.0.0.1", "GATEWAY_PORT": "0"}

        migrated = await _run(
            [GATEWAY, *services["migrate"]["command"]], env_of("migrate"), tmp_path
        )
        assert migrated.returncode == 0 and b"applied 0001_foundation" in migrated.stdout

        one, url_one = await _start(
            [GATEWAY, *services["gateway-1"]["command"]], env_of("g1"), tmp_path
        )
        try:
            two, url_two = await _start(
                [GATEWAY, *services["gateway-2"]["command"]], env_of("g2"), tmp_path
            )
            try:
                for url in (url_one, url_two):
                    probe = {**env_of("probe"), "GATEWAY_PORT": _port(url)}
                    healthy = await _run(_healthcheck(), probe, tmp_path)
                    assert healthy.returncode == 0, healthy.stderr
                auth = {"Authorization": f"Bearer {BOOTSTRAP}"}
                content = os.urandom(50_000)
                async with httpx.AsyncClient(timeout=30) as client:
                    sent = await client.post(
                        f"{url_one}/v1/files",
                        headers=auth,
                        data={"purpose": "user_data"},
                        files={"file": ("data.txt", content)},
                    )
                    assert sent.status_code == 200, sent.text
                    file_id = sent.json()["id"]
                    got = await client.get(f"{url_two}/v1/files/{file_id}/content", headers=auth)
                    assert got.status_code == 200 and got.content == content
            finally:
                assert await _stop(two) == 0
        finally:
            assert await _stop(one) == 0


def test_the_compose_healthcheck_of_seaweedfs_is_a_real_route(seaweedfs: SeaweedFS) -> None:
    """compose.yaml probes SeaweedFS's S3 port at /healthz; the tests' `weed` answers it."""
    test = compose()["services"]["seaweedfs"]["healthcheck"]["test"]
    url = test[-1]
    assert url == "http://127.0.0.1:8333/healthz"
    port = seaweedfs.endpoint_url.rsplit(":", 1)[1]
    answer = httpx.get(url.replace("8333", port), timeout=10)
    assert answer.status_code == 200
