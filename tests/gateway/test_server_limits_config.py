"""The built-in server's limits in `[server]`: defaults, values, and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, ServerConfig, load_config


def _load(tmp_path: Path, text: str) -> ServerConfig:
    path = tmp_path / "gateway.toml"
    path.write_text("[server]\n" + text, encoding="utf-8")
    return load_config(path, environ={}).server


def test_defaults(tmp_path: Path) -> None:
    server = _load(tmp_path, "")
    assert server.request_head_timeout_s == 10.0
    assert server.request_body_timeout_s == 30.0
    assert server.max_head_bytes == 65_536
    assert server.max_headers == 100
    assert server.max_connections == 10_000
    assert server.websocket_max_message_bytes == 1_048_576
    assert server.keyring_check_interval_s == 30.0


def test_values_are_read(tmp_path: Path) -> None:
    server = _load(
        tmp_path,
        "request_head_timeout_s = 2\nrequest_body_timeout_s = 0.5\nmax_head_bytes = 8192\n"
        "max_headers = 50\nmax_connections = 64\nkeyring_check_interval_s = 5\n",
    )
    assert server.keyring_check_interval_s == 5.0
    assert (server.request_head_timeout_s, server.request_body_timeout_s) == (2.0, 0.5)
    assert (server.max_head_bytes, server.max_headers, server.max_connections) == (8192, 50, 64)


@pytest.mark.parametrize(
    ("line", "key", "problem"),
    [
        ("request_head_timeout_s = 0", "server.request_head_timeout_s", "greater than 0"),
        ("request_body_timeout_s = -1", "server.request_body_timeout_s", "greater than 0"),
        ('request_body_timeout_s = "30"', "server.request_body_timeout_s", "number"),
        ("max_head_bytes = 100", "server.max_head_bytes", "from 1024 to 1048576"),
        ("max_head_bytes = 2_000_000", "server.max_head_bytes", "from 1024 to 1048576"),
        ("max_headers = 0", "server.max_headers", "from 1 to 10000"),
        ("max_connections = 0", "server.max_connections", "at least 1"),
        ("max_connections = 1.5", "server.max_connections", "integer"),
        ("websocket_max_message_bytes = 0", "server.websocket_max_message_bytes", "at least 1"),
        ("keyring_check_interval_s = 0", "server.keyring_check_interval_s", "greater than 0"),
        ("max_conections = 5", "server.max_conections", "did you mean"),
    ],
)
def test_bad_values_are_config_errors(tmp_path: Path, line: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, line + "\n")
    assert caught.value.key == key
    assert problem in caught.value.problem
