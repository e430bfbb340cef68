"""The deployment files parse, and name only what the gateway really reads: each environment
variable is one the config loader takes, each port the configured one, each config file one
the loader accepts. Also the compose wiring, the nginx configuration and the systemd units."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gateway.config.loader import load_config
from gateway.config.schema import ServerConfig
from tests.deploy.artifacts import (
    COMPOSE,
    GATEWAY_READS,
    PYTHON_VARIABLES,
    ROOT,
    SYSTEMD,
    compose,
    dockerfile_env,
    dockerfile_exec,
    dockerfile_instructions,
    env_example,
    gateway_services,
    interpolate,
    nginx_directives,
    systemd_unit,
)

DEFAULT_PORT = ServerConfig().port
GRACEFUL_S = ServerConfig().graceful_timeout_s
WORKERS_STOP_S = 10  # the parent kills workers graceful_timeout_s + 10 s after the signal


def _provider_key_variables(toml: Path) -> set[str]:
    return {p.api_key_env for p in load_config(toml, environ={}).providers if p.api_key_env}


def test_every_yaml_file_parses() -> None:
    files = sorted((ROOT / "deploy").rglob("*.yaml"))
    templates = ROOT / "deploy" / "helm" / "gateway" / "templates"
    plain = [f for f in files if templates not in f.parents]
    assert {f.name for f in plain} == {"compose.yaml", "Chart.yaml", "values.yaml"}
    for path in plain:
        assert isinstance(yaml.safe_load(path.read_text()), dict), path


def test_the_image_runs_gateway_serve_as_a_non_root_user_on_the_default_port() -> None:
    instructions = dockerfile_instructions()
    assert dockerfile_exec("ENTRYPOINT") + dockerfile_exec("CMD") == ["gateway", "serve"]
    (user,) = [rest for word, rest in instructions if word == "USER"]
    assert not user.startswith(("0", "root"))
    (expose,) = [rest for word, rest in instructions if word == "EXPOSE"]
    env = dockerfile_env()
    assert int(expose) == int(env["GATEWAY_PORT"]) == DEFAULT_PORT
    assert env["GATEWAY_HOST"] == "0.0.0.0"
    assert set(env) <= GATEWAY_READS | PYTHON_VARIABLES


def test_the_image_installs_exactly_the_locked_runtime_dependencies() -> None:
    runs = [rest for word, rest in _all_stages() if word == "RUN"]
    assert any("--require-hashes -r requirements/runtime.lock.txt" in run for run in runs)
    assert any("--no-deps --no-build-isolation ." in run for run in runs)
    # Everything the package installation reads is let through .dockerignore.
    ignore = (ROOT / ".dockerignore").read_text().split()
    copied = [
        rest.split()[0] for word, rest in _all_stages() if word == "COPY" and "--" not in rest
    ]
    for source in copied:
        assert f"!{source}" in ignore or f"!{source}/" in ignore, source


def _all_stages() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return [(ln.partition(" ")[0], ln.partition(" ")[2]) for ln in lines]


def test_compose_gateways_get_only_variables_the_gateway_reads() -> None:
    document = compose()
    services = gateway_services(document)
    assert set(services) == {"migrate", "gateway-1", "gateway-2"}
    allowed = GATEWAY_READS | _provider_key_variables(COMPOSE / "gateway.toml")
    for name, service in services.items():
        assert set(service["environment"]) <= allowed, name
        assert "env_file" not in service  # only the variables listed, never all of .env
    # .env.example holds exactly what compose.yaml substitutes, with no value filled in
    # for a secret.
    example = env_example(COMPOSE / ".env.example")
    substituted = set(re.findall(r"\$\{([A-Z0-9_]+)", (COMPOSE / "compose.yaml").read_text()))
    assert set(example) == substituted
    for secret in ("POSTGRES_PASSWORD", "GATEWAY_MASTER_KEY", "AWS_SECRET_ACCESS_KEY"):
        assert example[secret] == ""


def test_compose_config_file_is_one_the_gateway_accepts() -> None:
    """.env.example filled in (its empty secrets given test values), as compose passes it."""
    env = env_example(COMPOSE / ".env.example")
    env.update(
        POSTGRES_PASSWORD="pw",
        GATEWAY_MASTER_KEY="A" * 43 + "=",  # base64 of 32 bytes
        AWS_ACCESS_KEY_ID="id",
        AWS_SECRET_ACCESS_KEY="secret",
    )
    environment = compose()["x-gateway"]["environment"]
    resolved = {name: interpolate(str(value), env) for name, value in environment.items()}
    config = load_config(COMPOSE / "gateway.toml", environ=resolved)
    assert config.files.store == "s3" and config.files.s3_endpoint_url == "http://seaweedfs:8333"
    assert config.files.s3_access_key_id == "id"
    assert config.database_url.startswith("postgresql://gateway:pw@postgres:5432/")
    assert config.redis_url == "redis://redis:6379/0"
    assert config.server.graceful_timeout_s == GRACEFUL_S
    with pytest.raises(AssertionError, match="POSTGRES_PASSWORD is required"):
        interpolate(environment["GATEWAY_DATABASE_URL"], {})


def test_compose_migrates_once_before_the_gateways_start() -> None:
    document = compose()
    services = document["services"]
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("gateway-1", "gateway-2"):
        service = services[name]
        assert service["command"] == ["serve"]
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        grace = int(service["stop_grace_period"].removesuffix("s"))
        assert grace > GRACEFUL_S + WORKERS_STOP_S
    for name in ("postgres", "redis", "seaweedfs", "nginx"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name


def test_nginx_balances_the_compose_gateways_without_buffering_streams() -> None:
    directives = nginx_directives((COMPOSE / "nginx.conf").read_text())
    servers = [args[0] for blocks, name, args in directives if name == "server"]
    gateways = sorted(
        n for n, s in gateway_services(compose()).items() if s["command"] == ["serve"]
    )
    assert servers == [f"{name}:{DEFAULT_PORT}" for name in gateways]
    location = {name: args for blocks, name, args in directives if blocks[-1:] == ("location /",)}
    assert location["proxy_pass"] == ["http://gateway"]
    assert location["proxy_buffering"] == ["off"]  # SSE passes through as it comes
    assert location["proxy_request_buffering"] == ["off"]
    assert location["proxy_http_version"] == ["1.1"]
    assert int(location["proxy_read_timeout"][0].removesuffix("s")) >= 600  # read_timeout_s
    body_mb = int(location["client_max_body_size"][0].removesuffix("m"))
    assert body_mb * 1_000_000 > ServerConfig().max_file_body_bytes
    nginx = compose()["services"]["nginx"]
    assert set(nginx["depends_on"]) == set(gateways)


def test_systemd_units_run_the_gateway_with_a_drain_that_fits() -> None:
    serve, migrate = systemd_unit("gateway.service"), systemd_unit("gateway-migrate.service")
    assert serve["Service"]["ExecStart"] == "/opt/gateway/bin/gateway serve"
    assert migrate["Service"]["ExecStart"] == "/opt/gateway/bin/gateway migrate"
    assert migrate["Service"]["Type"] == "oneshot"
    assert "gateway-migrate.service" in serve["Unit"]["Requires"].split()
    assert "gateway-migrate.service" in serve["Unit"]["After"].split()
    service = serve["Service"]
    assert int(service["TimeoutStopSec"].removesuffix("s")) > GRACEFUL_S + WORKERS_STOP_S
    assert service["KillMode"] == "mixed"  # SIGTERM to the parent only
    assert service["EnvironmentFile"] == "/etc/gateway/gateway.env"
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "RestrictSUIDSGID"):
        assert service[key] == "yes", key
    assert service["ProtectSystem"] == "strict" and service["User"] != "root"
    for unit in (serve, migrate):
        names = {item.partition("=")[0] for item in unit["Service"]["Environment"].split()}
        assert names <= GATEWAY_READS
    example = env_example(SYSTEMD / "gateway.env.example")
    assert set(example) <= GATEWAY_READS | {"OPENAI_API_KEY"}
    assert int(example["GATEWAY_PORT"]) == DEFAULT_PORT


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_verifies_the_units(tmp_path: Path) -> None:
    """With ExecStart= pointing at this venv's `gateway` (the one thing that differs here)."""
    gateway = Path(shutil.which("gateway") or ROOT / ".venv" / "bin" / "gateway")
    assert gateway.exists()
    for name in ("gateway.service", "gateway-migrate.service"):
        text = (SYSTEMD / name).read_text().replace("/opt/gateway/bin/gateway", str(gateway))
        (tmp_path / name).write_text(text)
    names = ["./gateway.service", "./gateway-migrate.service"]
    result = subprocess.run(
        ["systemd-analyze", "verify", *names], cwd=tmp_path, capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stderr.decode()
    # ...and verify does check the command: the units as shipped name /opt/gateway.
    for name in ("gateway.service", "gateway-migrate.service"):
        (tmp_path / name).write_text((SYSTEMD / name).read_text())
    result = subprocess.run(
        ["systemd-analyze", "verify", *names], cwd=tmp_path, capture_output=True, timeout=60
    )
    assert result.returncode != 0 and b"/opt/gateway/bin/gateway" in result.stderr


def test_deploy_md_documents_exactly_real_variables() -> None:
    """docs/deploy.md names no variable the gateway does not read, and every one the files
    give it."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    named = set(re.findall(r"`([A-Z][A-Z0-9]*_[A-Z0-9_]+)`", text))
    providers = _provider_key_variables(COMPOSE / "gateway.toml")
    others = {"GATEWAY_NEW_MASTER_KEY", "PROMETHEUS_MULTIPROC_DIR", "PYTHON_IMAGE"}  # build arg
    assert named <= GATEWAY_READS | providers | others
    used = set(compose()["x-gateway"]["environment"]) | set(dockerfile_env())
    used |= set(env_example(SYSTEMD / "gateway.env.example"))
    assert used - PYTHON_VARIABLES <= named
