"""The configuration as msgspec Structs: one conversion of the file merged with the environment,
and msgspec's errors put as file, dotted key and problem, word for word."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from actors.fine_tuning.settings import FineTuningConfig
from gateway.config import Config, ConfigError, ServerConfig, load_config
from gateway.config.schema import DatabaseConfig

PROVIDER = "[[providers]]\nname = 'p{n}'\nkind = 'openai'\nbase_url = 'https://x.example'\n"


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no stray ./gateway.toml


def refused(tmp_path: Path, text: str, **environ: str) -> tuple[Path, ConfigError]:
    path = tmp_path / "gateway.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ)
    return path, caught.value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # unknown keys: top level, a nested table, the second of an array of tables, a kind
        ("[fine_tuning]\npoll_every = 1\n", "fine_tuning.poll_every: unknown key"),
        (
            PROVIDER.format(n=0) + PROVIDER.format(n=1) + "read_timeout = 5\n",
            'providers[1].read_timeout: unknown key (did you mean "read_timeout_s"?)',
        ),
        (
            "[actors.accountant]\ninbox_capacty = 5\n",
            'actors.accountant.inbox_capacty: unknown key (did you mean "inbox_capacity"?)',
        ),
        ("[files]\ns3_access_key_id = 'AKIA'\n", "files.s3_access_key_id: unknown key"),
        ("operator_keys = ['x']\n", "operator_keys: unknown key"),
        # wrong types
        ("[server]\nhost = ['a']\n", "server.host: must be a string, got an array"),
        ("[server]\nport = '80'\n", 'server.port: must be an integer from 0 to 65535, got "80"'),
        ("[webhooks]\nallow_http = 'no'\n", 'webhooks.allow_http: must be true or false, got "no"'),
        ("[images]\n[[images.x]]\n", "images.x: unknown key"),
        ("[[server]]\nport = 1\n", "server: must be a table ([server]), got an array"),
        # constraints
        (
            PROVIDER.format(n=0) + "read_timeout_s = -1\n",
            "providers[0].read_timeout_s: must be a finite number greater than 0, got -1",
        ),
        (
            "[database]\nstatement_timeout_s = 0\n",
            "database.statement_timeout_s: must be a number from 0.01 to 3600, got 0",
        ),
        (
            "[fine_tuning]\nmax_watched = 100001\n",
            "fine_tuning.max_watched: must be an integer from 1 to 100000, got 100001",
        ),
        (
            "[webhooks]\ncompletion_success_sample_rate = 1.5\n",
            "webhooks.completion_success_sample_rate: must be a number from 0 to 1, got 1.5",
        ),
        (
            "[server]\nhttp_server = 'h2'\n",
            'server.http_server: must be one of builtin, hypercorn, got "h2"',
        ),
        ("[server]\nhost = ' '\n", "server.host: must not be empty"),
        # checks msgspec cannot express, with the same shape
        (
            "[fine_tuning]\npoll_initial_s = 5\npoll_max_s = 2\n",
            "fine_tuning.poll_max_s: must be at least poll_initial_s",
        ),
        ("[files]\ns3_prefix = 'a/'\n", 'files.s3_prefix: applies only with store = "s3"'),
    ],
)
def test_each_problem_names_file_key_and_reason(tmp_path: Path, text: str, message: str) -> None:
    path, error = refused(tmp_path, text)
    assert str(error) == f"{path}: {message}"
    assert error.file == str(path)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("GATEWAY_PORT", "70000", "must be an integer from 0 to 65535, got 70000"),
        ("GATEWAY_WORKERS", "1.5", 'must be an integer of at least 1, got "1.5"'),
        ("GATEWAY_HOST", "\t", None),  # blank: not an override
        ("GATEWAY_LOG_LEVEL", "loud", 'must be one of DEBUG, INFO, WARNING, ERROR, got "loud"'),
        ("GATEWAY_DATA_DIR", "var", None),
        ("GATEWAY_REDIS_URL", "redis", 'must be a redis://, rediss:// or unix:// URL, got "redis"'),
    ],
)
def test_a_bad_override_names_the_variable(
    tmp_path: Path, variable: str, value: str, message: str | None
) -> None:
    if message is None:
        load_config(environ={variable: value})
        return
    with pytest.raises(ConfigError) as caught:
        load_config(environ={variable: value})
    assert str(caught.value) == f"environment: {variable}: {message}"


def test_an_override_is_merged_before_the_conversion(tmp_path: Path) -> None:
    """The variable's value replaces the file's before anything is checked, so a bad value in
    the file that a variable overrides is never looked at."""
    path = tmp_path / "gateway.toml"
    path.write_text("[server]\nport = 'eighty'\nworkers = 2\n", encoding="utf-8")
    server = load_config(path, environ={"GATEWAY_PORT": "8081"}).server
    assert (server.port, server.workers) == (8081, 2)


def test_the_file_error_is_the_files_when_no_variable_overrides(tmp_path: Path) -> None:
    path, error = refused(tmp_path, "[server]\nport = 'eighty'\n", GATEWAY_WORKERS="3")
    assert (error.file, error.key) == (str(path), "server.port")


def test_each_default_is_written_once(tmp_path: Path) -> None:
    """An empty file is the structs' own defaults: the loader restates none."""
    path = tmp_path / "gateway.toml"
    path.write_text("", encoding="utf-8")
    assert load_config(path, environ={}) == Config(source=str(path))
    config = Config()
    assert config.server == ServerConfig()
    assert config.fine_tuning == FineTuningConfig()
    assert config.database == DatabaseConfig()
    assert config.database_url == "sqlite:///var/gateway.db"  # follows data_dir


def test_sections_are_frozen_structs_with_their_value_types(tmp_path: Path) -> None:
    config = load_config(environ={})
    assert isinstance(config, msgspec.Struct)
    with pytest.raises(AttributeError):
        config.server.port = 1  # type: ignore[misc]
    assert isinstance(config.providers, tuple) and isinstance(config.data_dir, Path)
    moved = msgspec.structs.replace(config.server, port=9)
    assert (moved.port, config.server.port) == (9, 8080)
