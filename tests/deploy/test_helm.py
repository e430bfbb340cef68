"""The Helm chart rendered (tests/deploy/helm_render.py: the subset of Go templates it uses)
and read back as Kubernetes would: kinds, probes, ports, variables, the migration hook, the
drain against terminationGracePeriodSeconds, and the ConfigMap's gateway.toml loaded."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from gateway.config.loader import load_config
from gateway.config.schema import ServerConfig
from tests.deploy.artifacts import GATEWAY_READS, chart
from tests.deploy.helm_render import Chart, TemplateError


def _by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds = [d["kind"] for d in docs]
    assert len(kinds) == len(set(kinds)), kinds
    return {d["kind"]: d for d in docs}


def _container(pod_owner: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_owner["spec"]["template"]["spec"]["containers"]
    return container


def test_the_chart_renders_every_kind() -> None:
    docs = _by_kind(chart().documents())
    assert set(docs) == {
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Job",
        "PodDisruptionBudget",
        "Service",
    }
    for doc in docs.values():
        assert doc["metadata"]["name"].startswith("demo-gateway")
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "demo"


def test_probes_ports_and_service() -> None:
    docs = _by_kind(chart().documents())
    container = _container(docs["Deployment"])
    assert container["args"] == ["serve"]
    (port,) = container["ports"]
    assert port == {"name": "http", "containerPort": ServerConfig().port, "protocol": "TCP"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert int(env["GATEWAY_PORT"]) == port["containerPort"]
    assert env["GATEWAY_HOST"] == "0.0.0.0"
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    service = docs["Service"]["spec"]
    assert service["ports"][0]["targetPort"] == "http"
    selector = docs["Deployment"]["spec"]["selector"]["matchLabels"]
    assert (
        service["selector"]
        == selector
        == docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]
    )
    assert docs["Deployment"]["spec"]["template"]["metadata"]["labels"] == selector
    assert (
        docs["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"]
        == (docs["Deployment"]["metadata"]["name"])
    )


def test_variables_are_ones_the_gateway_reads_and_secrets_are_references() -> None:
    rendered = chart()
    docs = _by_kind(rendered.documents())
    container = _container(docs["Deployment"])
    toml = docs["ConfigMap"]["data"]["gateway.toml"]
    providers = _load(toml, _pod_environment(docs["Deployment"])).providers
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names))
    assert set(names) <= GATEWAY_READS | {p.api_key_env for p in providers if p.api_key_env}
    secret_names = {e["name"] for e in container["env"] if "valueFrom" in e}
    assert {"GATEWAY_MASTER_KEY", "GATEWAY_DATABASE_URL", "GATEWAY_REDIS_URL"} <= secret_names
    assert {"STRIPE_SECRET_KEY", "STRIPE_WEBHOOK_SECRET", "GATEWAY_OPERATOR_KEY"} <= secret_names
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= secret_names
    for entry in container["env"]:
        if "valueFrom" in entry:
            assert "value" not in entry and "secretKeyRef" in entry["valueFrom"]
    assert "Secret" not in {d["kind"] for d in rendered.documents()}  # referenced, never made


# A value of the right form for each secret the chart references (tests only).
SECRETS = {
    "GATEWAY_DATABASE_URL": "postgresql://gateway:pw@db:5432/gateway",
    "GATEWAY_MASTER_KEY": "A" * 43 + "=",
    "GATEWAY_REDIS_URL": "redis://redis:6379/0",
    "GATEWAY_OPERATOR_KEY": "service_op_" + "a" * 40,
    "GATEWAY_BOOTSTRAP_MANAGEMENT_KEY": "service_mgmt_" + "b" * 24,
    "STRIPE_SECRET_KEY": "sk_test_x",
    "STRIPE_WEBHOOK_SECRET": "whsec_x",
    "AWS_ACCESS_KEY_ID": "id",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "OPENAI_API_KEY": "sk-x",
}


def _pod_environment(deployment: dict[str, Any]) -> dict[str, str]:
    """The Deployment's variables as the pod gets them, each secret given a test value."""
    env = {}
    for entry in _container(deployment)["env"]:
        env[entry["name"]] = entry["value"] if "value" in entry else SECRETS[entry["name"]]
    return env


def _load(toml: str, environ: dict[str, str] | None = None) -> Any:
    """`toml` as the gateway loads it, with `environ` (GATEWAY_CONFIG dropped: the mounted
    file is `toml`)."""
    environ = {k: v for k, v in (environ or {}).items() if k != "GATEWAY_CONFIG"}
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as file:
        file.write(toml)
        file.flush()
        return load_config(file.name, environ=environ)


def test_the_configmap_holds_a_config_the_gateway_accepts_and_pods_roll_on_change() -> None:
    rendered = chart()
    docs = _by_kind(rendered.documents())
    environ = _pod_environment(docs["Deployment"])
    assert environ["GATEWAY_ENV"] == "production"
    config = _load(docs["ConfigMap"]["data"]["gateway.toml"], environ)
    assert config.files.store == "s3" and config.billing.payment_provider == "stripe"
    assert config.billing.stripe_secret_key == "sk_test_x"
    assert config.server.port == ServerConfig().port and config.server.host == "0.0.0.0"
    assert config.providers[0].api_key == "sk-x"
    volumes = docs["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "config", "configMap": {"name": docs["ConfigMap"]["metadata"]["name"]}} in (
        volumes
    )
    mounts = {m["name"]: m["mountPath"] for m in _container(docs["Deployment"])["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in _container(docs["Deployment"])["env"]}
    assert env["GATEWAY_CONFIG"] == mounts["config"] + "/gateway.toml"
    assert env["GATEWAY_DATA_DIR"] == mounts["data"]

    def checksum(values: dict[str, Any]) -> str:
        deployment = _by_kind(rendered.documents(values=values))["Deployment"]
        return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum({}) != checksum({"config": "[server]\ngraceful_timeout_s = 20\n"})


def test_migration_is_a_pre_install_and_pre_upgrade_hook_with_the_database_url_only() -> None:
    docs = _by_kind(chart().documents())
    job = docs["Job"]
    hooks = job["metadata"]["annotations"]["helm.sh/hook"].split(",")
    assert hooks == ["pre-install", "pre-upgrade"]
    container = _container(job)
    assert container["args"] == ["migrate"]
    assert _container(docs["Deployment"])["image"] == container["image"]
    assert {e["name"] for e in container["env"]} == {"GATEWAY_DATABASE_URL", "GATEWAY_DATA_DIR"}
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # Its pod is never one of the Service's endpoints.
    labels = job["spec"]["template"]["metadata"]["labels"]
    selector = docs["Service"]["spec"]["selector"]
    assert not all(labels.get(k) == v for k, v in selector.items())


def test_termination_grace_exceeds_the_pre_stop_pause_and_the_drain() -> None:
    rendered = chart()
    values = rendered.values
    docs = _by_kind(rendered.documents())
    spec = docs["Deployment"]["spec"]["template"]["spec"]
    toml = _load(docs["ConfigMap"]["data"]["gateway.toml"], _pod_environment(docs["Deployment"]))
    pause = int(_container(docs["Deployment"])["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pause == values["preStopSleepSeconds"]
    # Workers still running graceful_timeout_s + 10 s after SIGTERM are killed by the parent.
    assert spec["terminationGracePeriodSeconds"] > pause + toml.server.graceful_timeout_s + 10


def test_values_switch_parts_on_and_off() -> None:
    fixed = _by_kind(chart().documents(values={"autoscaling": {"enabled": False}}))
    assert "HorizontalPodAutoscaler" not in fixed
    assert fixed["Deployment"]["spec"]["replicas"] == 2
    scaled = _by_kind(chart().documents())
    assert "replicas" not in scaled["Deployment"]["spec"]  # the HPA owns it
    bare = chart().documents(
        values={"migration": {"enabled": False}, "podDisruptionBudget": {"enabled": False}}
    )
    assert {"Job", "PodDisruptionBudget"}.isdisjoint(d["kind"] for d in bare)
    tagged = _by_kind(chart().documents(values={"image": {"tag": "1.2.3"}}))
    assert _container(tagged["Deployment"])["image"] == "model-gateway:1.2.3"


def test_the_renderer_is_strict(tmp_path: Path) -> None:
    """What it cannot render as Helm would is an error, never a silent empty string."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "Chart.yaml").write_text("name: c\nversion: 1.0.0\nappVersion: '1'\n")
    (tmp_path / "values.yaml").write_text("a: {b: 1}\nbig: 1000000\n")
    cases = {
        "typo.yaml": "x: {{ .Values.a.c }}",
        "function.yaml": "x: {{ .Values.a.b | upper }}",
        "big.yaml": "x: {{ .Values.big }}",
        "map.yaml": "x: {{ .Values.a }}",
        "open.yaml": "{{- if .Values.a }}\nx: 1",
    }
    for name, text in cases.items():
        for old in (tmp_path / "templates").iterdir():
            old.unlink()
        (tmp_path / "templates" / name).write_text(text)
        with pytest.raises(TemplateError):
            Chart(tmp_path).render()
