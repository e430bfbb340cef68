"""`[actors.<kind>]`: merged over each kind's defaults; bad values stop the start with the file,
key and reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.settings import DEFAULTS
from gateway.config import ConfigError, load_config


def load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    load_config(path, environ={})


def test_without_a_table_every_kind_has_its_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no stray ./gateway.toml
    config = load_config(None, environ={})
    assert dict(config.actors) == DEFAULTS


def test_a_table_overrides_only_the_keys_it_sets(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        "[actors.rate_limiter]\ninbox_capacity = 8\nidle_retire_s = 5.0\n"
        '[actors.batch_writer]\noverflow = "drop_oldest"\n'
    )
    config = load_config(path, environ={})
    limiter = config.actors["rate_limiter"]
    assert (limiter.inbox_capacity, limiter.idle_retire_s) == (8, 5.0)
    assert limiter.overflow == DEFAULTS["rate_limiter"].overflow
    assert config.actors["batch_writer"].overflow == "drop_oldest"
    assert config.actors["accountant"] == DEFAULTS["accountant"]


@pytest.mark.parametrize(
    ("toml", "key", "problem"),
    [
        ("[actors.rate_limiter]\ninbox_capacity = 0", "actors.rate_limiter", "inbox_capacity"),
        ("[actors.rate_limiter]\nmax_restarts = -2", "actors.rate_limiter", "max_restarts"),
        (
            '[actors.rate_limiter]\noverflow = "never"',
            "actors.rate_limiter.overflow",
            'must be one of drop_oldest, reject, wait, got "never"',
        ),
        ("[actors.rate_limiter]\nbackoff = 1", "actors.rate_limiter.backoff", "unknown key"),
        ("[actors.ratelimiter]\ninbox_capacity = 2", "actors.ratelimiter", "unknown actor kind"),
        ('[actors.accountant]\noverflow = "drop_oldest"', "actors.accountant.overflow", "only"),
        ("[actors]\nrate_limiter = 3", "actors.rate_limiter", "must be a table"),
        ("[actors]\nrate_limiter = [{}]", "actors.rate_limiter", "must be a table"),
        ("actors = 1", "actors", "must be a table ([actors]), got 1"),
    ],
)
def test_bad_values_fail_with_file_key_and_reason(
    tmp_path: Path, toml: str, key: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load(tmp_path, toml)
    assert refused.value.file == str(tmp_path / "gateway.toml")
    assert refused.value.key == key
    assert problem in refused.value.problem
