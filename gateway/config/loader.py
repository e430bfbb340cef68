"""Load the gateway's configuration from one TOML file plus `GATEWAY_*` environment variables.

A bad configuration fails at start with one `ConfigError` that names the file (or `environment`),
the dotted key (`providers[1].base_url`) or variable, and what is wrong. Unknown keys are errors so
typos are caught. Secret values (API keys, the master key, the bootstrap key, URL passwords) are
never echoed in errors.

This module knows where values come from (file, table, environment) and reports where a problem
is; each table's parser is in sections.py, what a valid value is in values.py, the
dataclasses in schema.py. It only reads: it creates no directories and opens no connections.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import gateway.config.values as values
from gateway.config import sections
from gateway.config.schema import Config
from gateway.config.table import ENVIRONMENT, ConfigError, T, Table

DEFAULT_FILE = "gateway.toml"


def _find_source(path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> str | None:
    if path is None:
        named = environ.get("GATEWAY_CONFIG", "")
        if not named:
            return DEFAULT_FILE if Path(DEFAULT_FILE).exists() else None
        path = named
    file = os.fspath(path)
    if not Path(file).exists():
        raise ConfigError(file, "", "file not found")
    return file


def _read_toml(file: str) -> dict[str, object]:
    try:
        with open(file, "rb") as stream:
            return tomllib.load(stream)
    except FileNotFoundError as exc:
        raise ConfigError(file, "", "file not found") from exc
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read the file: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(file, "", "not valid UTF-8") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(file, "", str(exc)) from exc


def _from_env(environ: Mapping[str, str], name: str, convert: Callable[[object], T]) -> T | None:
    """The converted value of an environment variable; unset or blank means not overridden."""
    value = environ.get(name, "").strip()
    if not value:
        return None
    try:
        return convert(value)
    except values.InvalidValue as exc:
        raise ConfigError(ENVIRONMENT, name, exc.problem) from None


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Config:
    """Read the configuration: `path`, else `$GATEWAY_CONFIG`, else `./gateway.toml` if present.

    With none of them, the embedded defaults apply. `GATEWAY_*` variables in `environ` (default
    `os.environ`) override single values. Raises `ConfigError` for the first problem found.
    """
    env = os.environ if environ is None else environ
    source = _find_source(path, env)
    top = Table(source or "", "", _read_toml(source) if source is not None else {})

    data_dir = top.get("data_dir", values.parse_path, Path("var"))
    database_url = top.get("database_url", values.parse_database_url, None)
    redis_url = top.get("redis_url", values.parse_redis_url, None)
    master_key = top.get("master_key", values.parse_master_key, None)
    public_base_url = top.get("public_base_url", values.parse_http_url, None)
    log_level = top.get("log_level", values.parse_log_level, "INFO")
    server = sections.parse_server(top.table("server"))
    providers = sections.parse_providers(top.tables("providers"), env)
    models = sections.parse_models(top.tables("models"), providers)
    webhooks = sections.parse_webhooks(top.table("webhooks"))
    billing = sections.parse_billing(top.table("billing"))
    files = sections.parse_files(top.table("files"), env)
    images = sections.parse_images(top.table("images"), providers, models)
    fine_tuning = sections.parse_fine_tuning(top.table("fine_tuning"))
    database = sections.parse_database(top.table("database"))
    actors = sections.parse_actors(top.table("actors"))
    top.finish()

    data_dir = _from_env(env, "GATEWAY_DATA_DIR", values.parse_path) or data_dir
    database_url = _from_env(env, "GATEWAY_DATABASE_URL", values.parse_database_url) or database_url
    host = _from_env(env, "GATEWAY_HOST", values.parse_string)
    port = _from_env(env, "GATEWAY_PORT", values.from_env_int(values.parse_port))
    workers = _from_env(env, "GATEWAY_WORKERS", values.from_env_int(values.parse_positive_int))
    return Config(
        source=source,
        database_url=database_url or f"sqlite:///{data_dir}/gateway.db",
        redis_url=_from_env(env, "GATEWAY_REDIS_URL", values.parse_redis_url) or redis_url,
        data_dir=data_dir,
        master_key=_from_env(env, "GATEWAY_MASTER_KEY", values.parse_master_key) or master_key,
        public_base_url=_from_env(env, "GATEWAY_PUBLIC_BASE_URL", values.parse_http_url)
        or public_base_url,
        bootstrap_management_key=_from_env(
            env, "GATEWAY_BOOTSTRAP_MANAGEMENT_KEY", values.parse_bootstrap_key
        ),
        server=replace(
            server,
            host=server.host if host is None else host,
            port=server.port if port is None else port,
            workers=server.workers if workers is None else workers,
        ),
        providers=providers,
        models=models,
        webhooks=webhooks,
        billing=billing,
        log_level=_from_env(env, "GATEWAY_LOG_LEVEL", values.parse_log_level) or log_level,
        files=files,
        images=images,
        fine_tuning=fine_tuning,
        database=database,
        actors=actors,
        operator_keys=_from_env(env, "GATEWAY_OPERATOR_KEY", values.parse_operator_keys) or (),
    )
