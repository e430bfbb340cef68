"""Load the gateway's configuration from one TOML file plus `GATEWAY_*` environment variables.

A bad configuration fails at start with one `ConfigError` that names the file (or `environment`),
the dotted key (`providers[1].base_url`) or variable, and what is wrong. Unknown keys are errors so
typos are caught. Secret values (API keys, the master key, the bootstrap key, URL passwords) are
never echoed in errors.

This module knows where values come from (file, table, environment) and reports where a problem
is; what a valid value is lives in `gateway.config.schema`, whose dataclasses are re-exported
here. It only reads: it creates no directories and opens no connections.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import msgspec

import gateway.config.schema as schema
from actors.settings import DEFAULTS as ACTOR_DEFAULTS
from actors.settings import FIRE_AND_FORGET_KINDS, ActorSettings
from gateway.config.schema import (
    BillingConfig,
    Config,
    DatabaseConfig,
    FilesConfig,
    FineTuningConfig,
    ImagesConfig,
    ModelConfig,
    ProviderConfig,
    ServerConfig,
    WebhooksConfig,
)
from protocol.provider_keys import sendable_as_header

T = TypeVar("T")
D = TypeVar("D")

DEFAULT_FILE = "gateway.toml"
ENVIRONMENT = "environment"
_MISSING = object()


class ConfigError(Exception):
    """A bad configuration.

    `str()` is `<file>: <key>: <problem>`; `file` is the config file's path or `environment`, `key`
    a dotted path such as `providers[1].base_url` or an environment variable's name. Problems with
    the file as a whole (not found, TOML syntax) have an empty key and print as `<file>: <problem>`.
    """

    def __init__(self, file: str, key: str, problem: str) -> None:
        super().__init__(file, key, problem)
        self.file = file
        self.key = key
        self.problem = problem

    def __str__(self) -> str:
        if not self.key:
            return f"{self.file}: {self.problem}"
        return f"{self.file}: {self.key}: {self.problem}"


class _Table:
    """One TOML table being read; the keys it was asked for are known, any others are typos."""

    def __init__(self, file: str, path: str, data: Mapping[str, object]) -> None:
        self._file = file
        self._path = path
        self._data = data
        self._known: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self._path}.{name}" if self._path else name

    def error(self, name: str, problem: str) -> ConfigError:
        return ConfigError(self._file, self.key(name), problem)

    def _take(self, name: str) -> object:
        self._known.add(name)
        return self._data.get(name, _MISSING)

    def get(self, name: str, convert: Callable[[object], T], default: D) -> T | D:
        value = self._take(name)
        return default if value is _MISSING else self._convert(name, value, convert)

    def require(self, name: str, convert: Callable[[object], T]) -> T:
        value = self._take(name)
        if value is _MISSING:
            raise self.error(name, "is required")
        return self._convert(name, value, convert)

    def _convert(self, name: str, value: object, convert: Callable[[object], T]) -> T:
        try:
            return convert(value)
        except schema.InvalidValue as exc:
            raise self.error(name, exc.problem) from None

    def get_list(self, name: str, convert: Callable[[object], T]) -> list[T] | None:
        value = self._take(name)
        if value is _MISSING:
            return None
        if not isinstance(value, list):
            raise self.error(name, f"must be an array, got {schema.describe(value)}")
        items = []
        for index, item in enumerate(value):
            try:
                items.append(convert(item))
            except schema.InvalidValue as exc:
                raise self.error(f"{name}[{index}]", exc.problem) from None
        return items

    def table(self, name: str) -> _Table:
        value = self._take(name)
        if value is _MISSING:
            value = {}
        if not isinstance(value, dict):
            got = schema.describe(value)
            raise self.error(name, f"must be a table ([{self.key(name)}]), got {got}")
        return _Table(self._file, self.key(name), value)

    def tables(self, name: str) -> list[_Table]:
        value = self._take(name)
        if value is _MISSING:
            return []
        if not isinstance(value, list):
            raise self.error(name, f"must be an array of tables ([[{self.key(name)}]])")
        found = []
        for index, item in enumerate(value):
            path = f"{self.key(name)}[{index}]"
            if not isinstance(item, dict):
                raise ConfigError(self._file, path, f"must be a table, got {schema.describe(item)}")
            found.append(_Table(self._file, path, item))
        return found

    @property
    def file(self) -> str:
        return self._file

    @property
    def path(self) -> str:
        return self._path

    def raw(self) -> Mapping[str, object]:
        """The whole table, every key counted as known (the caller validates it)."""
        self._known.update(self._data)
        return self._data

    def finish(self) -> None:
        """Raise for the first key that was never asked for."""
        for name in self._data:
            if name not in self._known:
                close = difflib.get_close_matches(name, sorted(self._known), n=1)
                hint = f' (did you mean "{close[0]}"?)' if close else ""
                raise self.error(name, f"unknown key{hint}")


def _parse_server(table: _Table) -> ServerConfig:
    d = ServerConfig()
    server = ServerConfig(
        host=table.get("host", schema.parse_string, d.host),
        port=table.get("port", schema.parse_port, d.port),
        workers=table.get("workers", schema.parse_positive_int, d.workers),
        graceful_timeout_s=table.get(
            "graceful_timeout_s", schema.parse_positive_number, d.graceful_timeout_s
        ),
        keep_alive_timeout_s=table.get(
            "keep_alive_timeout_s", schema.parse_positive_number, d.keep_alive_timeout_s
        ),
        keep_alive_max_requests=table.get(
            "keep_alive_max_requests", schema.parse_positive_int, d.keep_alive_max_requests
        ),
        max_request_body_bytes=table.get(
            "max_request_body_bytes", schema.parse_positive_int, d.max_request_body_bytes
        ),
        max_audio_body_bytes=table.get(
            "max_audio_body_bytes", schema.parse_positive_int, d.max_audio_body_bytes
        ),
        max_file_body_bytes=table.get(
            "max_file_body_bytes", schema.parse_positive_int, d.max_file_body_bytes
        ),
        max_vision_body_bytes=table.get(
            "max_vision_body_bytes", schema.parse_positive_int, d.max_vision_body_bytes
        ),
        access_log=table.get("access_log", schema.parse_bool, d.access_log),
        sse_keepalive_s=table.get(
            "sse_keepalive_s", schema.parse_positive_number, d.sse_keepalive_s
        ),
        http_server=table.get("http_server", schema.one_of(schema.HTTP_SERVERS), d.http_server),
        request_head_timeout_s=table.get(
            "request_head_timeout_s", schema.parse_positive_number, d.request_head_timeout_s
        ),
        request_body_timeout_s=table.get(
            "request_body_timeout_s", schema.parse_positive_number, d.request_body_timeout_s
        ),
        max_head_bytes=table.get("max_head_bytes", schema.parse_head_bytes, d.max_head_bytes),
        max_headers=table.get("max_headers", schema.parse_header_count, d.max_headers),
        max_connections=table.get("max_connections", schema.parse_positive_int, d.max_connections),
        websocket_max_message_bytes=table.get(
            "websocket_max_message_bytes",
            schema.parse_positive_int,
            d.websocket_max_message_bytes,
        ),
        keyring_check_interval_s=table.get(
            "keyring_check_interval_s", schema.parse_positive_number, d.keyring_check_interval_s
        ),
    )
    table.finish()
    return server


def _parse_provider(table: _Table, environ: Mapping[str, str]) -> ProviderConfig:
    name = table.require("name", schema.parse_provider_name)
    kind = table.require("kind", schema.one_of(schema.PROVIDER_KINDS))
    base_url = table.require("base_url", schema.parse_http_url)
    api_key = table.get("api_key", schema.parse_header_secret, None)
    api_key_env = table.get("api_key_env", schema.parse_env_var_name, None)
    if api_key_env is not None:
        if api_key is not None:
            raise table.error("api_key_env", "set either api_key or api_key_env, not both")
        api_key = environ.get(api_key_env) or None  # unset: the provider is keyless (or BYOK)
        if api_key is not None and not sendable_as_header(api_key):
            raise table.error("api_key_env", f"the variable's value {schema.HEADER_SECRET}")
    supports = table.get_list("supports", schema.one_of(schema.CAPABILITIES))
    if supports == []:
        raise table.error(
            "supports", f"must list at least one of {', '.join(sorted(schema.CAPABILITIES))}"
        )
    d = ProviderConfig(name="", kind="", base_url="", api_key=None, supports=None)
    provider = ProviderConfig(
        name=name,
        kind=kind,
        base_url=base_url,
        api_key=api_key,
        api_key_env=api_key_env,
        supports=None if supports is None else frozenset(supports),
        max_connections=table.get("max_connections", schema.parse_positive_int, d.max_connections),
        max_keepalive_connections=table.get(
            "max_keepalive_connections", schema.parse_positive_int, d.max_keepalive_connections
        ),
        connect_timeout_s=table.get(
            "connect_timeout_s", schema.parse_positive_number, d.connect_timeout_s
        ),
        read_timeout_s=table.get("read_timeout_s", schema.parse_positive_number, d.read_timeout_s),
        keepalive_expiry_s=table.get(
            "keepalive_expiry_s", schema.parse_positive_number, d.keepalive_expiry_s
        ),
        max_response_bytes=table.get(
            "max_response_bytes", schema.parse_positive_int, d.max_response_bytes
        ),
    )
    table.finish()
    return provider


def _parse_providers(
    tables: list[_Table], environ: Mapping[str, str]
) -> tuple[ProviderConfig, ...]:
    providers: list[ProviderConfig] = []
    first: dict[str, str] = {}
    for table in tables:
        provider = _parse_provider(table, environ)
        if provider.name in first:
            got, other = schema.describe(provider.name), first[provider.name]
            raise table.error("name", f"duplicate provider name {got} (also {other})")
        first[provider.name] = table.key("name")
        providers.append(provider)
    return tuple(providers)


def _parse_models(
    tables: list[_Table], providers: tuple[ProviderConfig, ...]
) -> tuple[ModelConfig, ...]:
    names = sorted(provider.name for provider in providers)
    models: list[ModelConfig] = []
    first: dict[str, str] = {}
    for table in tables:
        model_id = table.require("id", schema.parse_string)
        if model_id in first:
            raise table.error(
                "id", f"duplicate model id {schema.describe(model_id)} (also {first[model_id]})"
            )
        first[model_id] = table.key("id")
        provider = table.require("provider", schema.parse_string)
        if provider not in names:
            got, configured = schema.describe(provider), ", ".join(names) or "none"
            raise table.error(
                "provider", f"no provider named {got} (configured providers: {configured})"
            )
        prices = {name: table.get(name, schema.parse_price, None) for name in schema.PRICE_FIELDS}
        translations = table.get("translations", schema.parse_bool, None)
        supports = next(p.supports for p in providers if p.name == provider)
        if translations and supports is not None and "audio" not in supports:
            raise table.error(
                "translations",
                f'the provider {schema.describe(provider)} does not list "audio" in its '
                "supports, so this model cannot serve translations",
            )
        models.append(
            ModelConfig(
                id=model_id,
                provider=provider,
                upstream=table.get("upstream", schema.parse_string, model_id),
                **prices,
                usd_per_image_by=table.get("usd_per_image_by", schema.parse_price_table, ()),
                max_document_tokens=table.get(
                    "max_document_tokens", schema.parse_document_tokens, None
                ),
                translations=translations,
            )
        )
        table.finish()
    return tuple(models)


def _parse_webhooks(table: _Table) -> WebhooksConfig:
    d = WebhooksConfig()
    networks = table.get_list("allowed_private_networks", schema.parse_cidr)
    webhooks = WebhooksConfig(
        allowed_private_networks=d.allowed_private_networks if networks is None else (*networks,),
        allow_http=table.get("allow_http", schema.parse_bool, d.allow_http),
        allowed_ports=tuple(table.get_list("allowed_ports", schema.integer_in(1, 65535)) or ()),
        completion_success_sample_rate=table.get(
            "completion_success_sample_rate",
            schema.parse_fraction,
            d.completion_success_sample_rate,
        ),
        secret_rotation_overlap_s=table.get(
            "secret_rotation_overlap_s", schema.parse_positive_number, d.secret_rotation_overlap_s
        ),
        retention_days=table.get("retention_days", schema.parse_positive_number, d.retention_days),
        poll_interval_s=table.get(
            "poll_interval_s", schema.parse_positive_number, d.poll_interval_s
        ),
        lease_ttl_s=table.get("lease_ttl_s", schema.parse_positive_number, d.lease_ttl_s),
        attempt_timeout_s=table.get(
            "attempt_timeout_s", schema.parse_positive_number, d.attempt_timeout_s
        ),
    )
    table.finish()
    return webhooks


def _parse_database(table: _Table) -> DatabaseConfig:
    timeout = table.get(
        "statement_timeout_s",
        schema.number_in(0.01, 3600.0),
        DatabaseConfig.statement_timeout_s,
    )
    table.finish()
    return DatabaseConfig(statement_timeout_s=timeout)


def _parse_actors(table: _Table) -> dict[str, ActorSettings]:
    """`[actors.<kind>]` tables, each merged over that kind's defaults (actors/settings.py)."""
    kinds = dict(ACTOR_DEFAULTS)
    for kind in list(table.raw()):
        sub = table.table(kind)
        if kind not in ACTOR_DEFAULTS:
            known = ", ".join(sorted(ACTOR_DEFAULTS))
            raise ConfigError(sub.file, sub.path, f"unknown actor kind (known: {known})")
        merged = {**msgspec.structs.asdict(ACTOR_DEFAULTS[kind]), **sub.raw()}
        try:
            kinds[kind] = msgspec.convert(merged, ActorSettings)
        except msgspec.ValidationError as exc:
            raise ConfigError(sub.file, sub.path, str(exc).replace("`$.", "`")) from None
        if kinds[kind].overflow == "drop_oldest" and kind not in FIRE_AND_FORGET_KINDS:
            raise ConfigError(
                sub.file,
                sub.key("overflow"),
                '"drop_oldest" is only for actors whose senders need no answer'
                f" ({', '.join(sorted(FIRE_AND_FORGET_KINDS))})",
            )
    return kinds


def _parse_billing(table: _Table) -> BillingConfig:
    d = BillingConfig()
    billing = BillingConfig(
        payment_provider=table.get(
            "payment_provider", schema.one_of(schema.PAYMENT_PROVIDERS), d.payment_provider
        ),
        enabled=table.get("enabled", schema.parse_bool, d.enabled),
        max_auto_topups_per_day=table.get(
            "max_auto_topups_per_day", schema.integer_in(0, 100), d.max_auto_topups_per_day
        ),
    )
    table.finish()
    return billing


def _parse_images(
    table: _Table, providers: tuple[ProviderConfig, ...], models: tuple[ModelConfig, ...]
) -> ImagesConfig:
    lifetime = table.get(
        "url_lifetime_s", schema.integer_in(1, 7 * 86_400), ImagesConfig.url_lifetime_s
    )
    default_model = table.get("default_model", schema.parse_string, None)
    table.finish()
    if default_model is not None:
        provider, slash, upstream = default_model.partition("/")
        known = any(m.id == default_model for m in models) or (
            slash and upstream and any(p.name == provider for p in providers)
        )
        if not known:
            raise table.error(
                "default_model",
                f"no [[models]] entry has the id {schema.describe(default_model)}, and it is not"
                " <provider>/<upstream model> of a configured provider",
            )
    return ImagesConfig(url_lifetime_s=lifetime, default_model=default_model)


def _parse_fine_tuning(table: _Table) -> FineTuningConfig:
    d = FineTuningConfig()
    positive = schema.parse_positive_number
    config = FineTuningConfig(
        poll_initial_s=table.get("poll_initial_s", positive, d.poll_initial_s),
        poll_max_s=table.get("poll_max_s", positive, d.poll_max_s),
        lease_ttl_s=table.get("lease_ttl_s", positive, d.lease_ttl_s),
        scan_interval_s=table.get("scan_interval_s", positive, d.scan_interval_s),
        max_watched=table.get("max_watched", schema.integer_in(1, 100_000), d.max_watched),
        max_example_tokens=table.get(
            "max_example_tokens", schema.integer_in(1), d.max_example_tokens
        ),
        events_poll_s=table.get("events_poll_s", positive, d.events_poll_s),
    )
    if config.poll_max_s < config.poll_initial_s:
        raise table.error("poll_max_s", "must be at least poll_initial_s")
    table.finish()
    return config


def _parse_files(table: _Table, environ: Mapping[str, str]) -> FilesConfig:
    store = table.get("store", schema.one_of(schema.BLOB_STORES), FilesConfig.store)
    endpoint = table.get("s3_endpoint_url", schema.parse_http_url, None)
    bucket = table.get("s3_bucket", schema.parse_bucket, None)
    region = table.get("s3_region", schema.parse_region, None)
    prefix = table.get("s3_prefix", schema.parse_key_prefix, None)
    free = table.get("free_quota_bytes", schema.integer_in(0), FilesConfig.free_quota_bytes)
    pro = table.get("pro_quota_bytes", schema.integer_in(0), FilesConfig.pro_quota_bytes)
    table.finish()
    if store != "s3":
        for name, value in (
            ("s3_endpoint_url", endpoint),
            ("s3_bucket", bucket),
            ("s3_region", region),
            ("s3_prefix", prefix),
        ):
            if value is not None:
                raise table.error(name, 'applies only with store = "s3"')
        return FilesConfig(store=store, free_quota_bytes=free, pro_quota_bytes=pro)
    if bucket is None:
        raise table.error("s3_bucket", 'is required with store = "s3"')
    key_id = environ.get("AWS_ACCESS_KEY_ID", "").strip() or None
    secret = environ.get("AWS_SECRET_ACCESS_KEY", "").strip() or None
    if (key_id is None) != (secret is None):
        missing = "AWS_SECRET_ACCESS_KEY" if secret is None else "AWS_ACCESS_KEY_ID"
        raise ConfigError(ENVIRONMENT, missing, "must be set with its pair (or neither)")
    return FilesConfig(
        store=store,
        free_quota_bytes=free,
        pro_quota_bytes=pro,
        s3_endpoint_url=endpoint,
        s3_bucket=bucket,
        s3_region=region,
        s3_prefix=prefix or "",
        s3_access_key_id=key_id,
        s3_secret_access_key=secret,
    )


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
    except schema.InvalidValue as exc:
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
    top = _Table(source or "", "", _read_toml(source) if source is not None else {})

    data_dir = top.get("data_dir", schema.parse_path, Path("var"))
    database_url = top.get("database_url", schema.parse_database_url, None)
    redis_url = top.get("redis_url", schema.parse_redis_url, None)
    master_key = top.get("master_key", schema.parse_master_key, None)
    public_base_url = top.get("public_base_url", schema.parse_http_url, None)
    log_level = top.get("log_level", schema.parse_log_level, "INFO")
    server = _parse_server(top.table("server"))
    providers = _parse_providers(top.tables("providers"), env)
    models = _parse_models(top.tables("models"), providers)
    webhooks = _parse_webhooks(top.table("webhooks"))
    billing = _parse_billing(top.table("billing"))
    files = _parse_files(top.table("files"), env)
    images = _parse_images(top.table("images"), providers, models)
    fine_tuning = _parse_fine_tuning(top.table("fine_tuning"))
    database = _parse_database(top.table("database"))
    actors = _parse_actors(top.table("actors"))
    top.finish()

    data_dir = _from_env(env, "GATEWAY_DATA_DIR", schema.parse_path) or data_dir
    database_url = _from_env(env, "GATEWAY_DATABASE_URL", schema.parse_database_url) or database_url
    host = _from_env(env, "GATEWAY_HOST", schema.parse_string)
    port = _from_env(env, "GATEWAY_PORT", schema.from_env_int(schema.parse_port))
    workers = _from_env(env, "GATEWAY_WORKERS", schema.from_env_int(schema.parse_positive_int))
    return Config(
        source=source,
        database_url=database_url or f"sqlite:///{data_dir}/gateway.db",
        redis_url=_from_env(env, "GATEWAY_REDIS_URL", schema.parse_redis_url) or redis_url,
        data_dir=data_dir,
        master_key=_from_env(env, "GATEWAY_MASTER_KEY", schema.parse_master_key) or master_key,
        public_base_url=_from_env(env, "GATEWAY_PUBLIC_BASE_URL", schema.parse_http_url)
        or public_base_url,
        bootstrap_management_key=_from_env(
            env, "GATEWAY_BOOTSTRAP_MANAGEMENT_KEY", schema.parse_bootstrap_key
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
        log_level=_from_env(env, "GATEWAY_LOG_LEVEL", schema.parse_log_level) or log_level,
        files=files,
        images=images,
        fine_tuning=fine_tuning,
        database=database,
        actors=actors,
        operator_keys=_from_env(env, "GATEWAY_OPERATOR_KEY", schema.parse_operator_keys) or (),
    )
