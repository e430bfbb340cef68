"""`gateway bench failover`: its gateway config is one the gateway accepts (a model of two
deployments, the second on the provider the simulated upstream fails), and its command line."""

from __future__ import annotations

from pathlib import Path

from bench.cli import _parser
from bench.failover import BROKEN, DEFAULT_FAULT, MODEL, Outcome, failover_toml
from bench.suite import gateway_config
from gateway.config import load_config
from gateway.inference.model_registry import ModelRegistry


def test_the_failover_config_is_a_model_of_two_deployments(tmp_path: Path) -> None:
    base = "http://127.0.0.1:9/v1"
    path = tmp_path / "gateway.toml"
    path.write_text(gateway_config(base, max_connections=8, keepalive=8) + failover_toml(base))
    config = load_config(path, environ={})
    model = ModelRegistry(config.providers, config.models).resolve(MODEL)
    assert model.route is not None
    assert [d.deployment for d in model.route.deployments] == ["sim/sim-small", f"broken/{BROKEN}"]


def test_the_command_line_and_the_report_line() -> None:
    args = _parser().parse_args(["failover", "--fault", "reset_after_frames=5", "--duration", "2"])
    assert (args.fault, args.duration, args.concurrency) == ("reset_after_frames=5", 2.0, 64)
    assert _parser().parse_args(["failover"]).fault == DEFAULT_FAULT
    line = Outcome("sse", 200, 199, 81.25).line("error_rate=1")
    assert line.startswith("failover sse: 99.50 % of 200 requests succeeded, p99 81.2 ms")
