"""`[[models.deployments]]` and a model's routing fields in the config: what is accepted, what
is refused at start with the file, the key and the reason (gateway/config/routing.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import Config, ConfigError, load_config
from gateway.inference.model_registry import ModelRegistry

PROVIDERS = """
[[providers]]
name = "east"
kind = "openai"
base_url = "http://east.example/v1"

[[providers]]
name = "west"
kind = "openai"
base_url = "http://west.example/v1"
"""
HA = """
[[models]]
id = "ha"
input_usd_per_mtok = 1
output_usd_per_mtok = 2
{fields}

[[models.deployments]]
provider = "east"
upstream = "a"
{first}

[[models.deployments]]
provider = "{second}"
upstream = "b"
"""


def _load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "gateway.toml"
    path.write_text(PROVIDERS + text)
    return load_config(path, environ={})


def _ha(fields: str = "", first: str = "", second: str = "west") -> str:
    return HA.format(fields=fields, first=first, second=second)


def test_a_model_of_two_deployments_with_its_routing_fields(tmp_path: Path) -> None:
    text = _ha(
        'strategy = "latency"\nmax_attempts = 4\nretry_budget_s = 12.5\ncooldown_s = 5\n'
        "retry_on_status = [429, 503]\nstream_failover = false",
        first="priority = 1\nweight = 3\nrpm = 100\ntpm = 10000\n"
        "health_check = { interval_s = 2.0, unhealthy_after = 2 }",
    )
    config = _load(tmp_path, text)
    (model,) = config.models
    assert (model.strategy, model.max_attempts, model.retry_budget_s) == ("latency", 4, 12.5)
    assert model.retry_on_status == (429, 503) and not model.stream_failover
    first, second = model.deployments
    assert (first.name, first.priority, first.weight, first.rpm, first.tpm) == (
        "east/a",
        1,
        3.0,
        100,
        10000,
    )
    assert first.health_check is not None and first.health_check.interval_s == 2.0
    assert first.health_check.healthy_after == 2
    assert second.health_check is None and second.weight == 1.0
    registry = ModelRegistry(config.providers, config.models)
    resolved = registry.resolve("ha")
    assert resolved.id == "ha" and resolved.route is not None
    assert [d.deployment for d in resolved.route.deployments] == ["east/a", "west/b"]


def test_a_model_of_one_provider_still_has_no_route(tmp_path: Path) -> None:
    config = _load(tmp_path, '[[models]]\nid = "m"\nprovider = "east"\nupstream = "x"\n')
    resolved = ModelRegistry(config.providers, config.models).resolve("m")
    assert resolved.id == "east/x" and resolved.route is None


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        (_ha(second="north"), "models[0].deployments[1].provider", 'no provider named "north"'),
        (_ha('provider = "east"'), "models[0].provider", "set on each of `deployments`"),
        (_ha('upstream = "x"'), "models[0].upstream", "set on each of `deployments`"),
        (_ha("retry_on_status = [404]"), "models[0].retry_on_status", "404 is the client's own"),
        (_ha("retry_on_status = [200]"), "models[0].retry_on_status[0]", "from 400 to 599"),
        (_ha("trip_failures = 6"), "models[0].trip_failures", "at most trip_window"),
        (_ha("max_cooldown_s = 1"), "models[0].max_cooldown_s", "at least cooldown_s"),
        (_ha('strategy = "random"'), "models[0].strategy", 'got "random"'),
        (_ha("max_attempts = 0"), "models[0].max_attempts", "from 1 to 20"),
        (_ha('fallbacks = ["nope"]'), "models[0].fallbacks[0]", '"nope" is not the id'),
        (_ha('fallbacks = ["ha"]'), "models[0].fallbacks[0]", '"ha" is not the id of another'),
        (_ha(first="weight = 0"), "models[0].deployments[0].weight", "greater than 0"),
        (_ha(first="priority = -1"), "models[0].deployments[0].priority", "at least 0"),
        (_ha(first="colour = 1"), "models[0].deployments[0].colour", "unknown key"),
        (
            _ha(first="health_check = { interval_s = 0 }"),
            "models[0].deployments[0].health_check.interval_s",
            "greater than 0",
        ),
        ('[[models]]\nid = "m"\n', "models[0].provider", "is required (or `deployments`)"),
    ],
)
def test_bad_routing_values_fail_at_start(
    tmp_path: Path, text: str, key: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    assert caught.value.key == key and problem in caught.value.problem, str(caught.value)
