"""The `[fine_tuning]` section: defaults, values, and the problems it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.fine_tuning.settings import FineTuningConfig
from gateway.config import ConfigError, load_config


def load(tmp_path: Path, text: str) -> FineTuningConfig:
    path = tmp_path / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, environ={}).fine_tuning


def test_defaults_and_values(tmp_path: Path) -> None:
    assert load(tmp_path, "") == FineTuningConfig()
    config = load(
        tmp_path,
        "[fine_tuning]\npoll_initial_s = 0.5\npoll_max_s = 4\nlease_ttl_s = 20\n"
        "scan_interval_s = 2\nmax_watched = 7\nmax_example_tokens = 128\nevents_poll_s = 0.25\n",
    )
    assert config == FineTuningConfig(
        poll_initial_s=0.5,
        poll_max_s=4.0,
        lease_ttl_s=20.0,
        scan_interval_s=2.0,
        max_watched=7,
        max_example_tokens=128,
        events_poll_s=0.25,
    )


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("poll_initial_s = 0", "poll_initial_s", "greater than 0"),
        ("poll_initial_s = 5\npoll_max_s = 2", "poll_max_s", "at least poll_initial_s"),
        ("lease_ttl_s = -1", "lease_ttl_s", "greater than 0"),
        ("max_watched = 0", "max_watched", "from 1"),
        ("max_example_tokens = 'lots'", "max_example_tokens", "integer"),
        ("poll_every = 1", "poll_every", ""),
    ],
)
def test_problems_name_the_key(tmp_path: Path, text: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f"[fine_tuning]\n{text}\n")
    assert key in caught.value.key
    assert problem in caught.value.problem
