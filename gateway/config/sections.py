"""One parser per configuration table: each reads its `Table` (table.py) into the frozen
dataclass of schema.py, with the value parsers of values.py."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

import gateway.config.schema as schema
import gateway.config.values as values
from actors.fine_tuning.settings import FineTuningConfig
from actors.settings import DEFAULTS as ACTOR_DEFAULTS
from actors.settings import FIRE_AND_FORGET_KINDS, ActorSettings
from gateway.config.schema import (
    BillingConfig,
    DatabaseConfig,
    FilesConfig,
    ImagesConfig,
    ModelConfig,
    ProviderConfig,
    ServerConfig,
    WebhooksConfig,
)
from gateway.config.table import ENVIRONMENT, ConfigError, Table
from protocol.provider_keys import sendable_as_header


def parse_server(table: Table) -> ServerConfig:
    d = ServerConfig()
    server = ServerConfig(
        host=table.get("host", values.parse_string, d.host),
        port=table.get("port", values.parse_port, d.port),
        workers=table.get("workers", values.parse_positive_int, d.workers),
        graceful_timeout_s=table.get(
            "graceful_timeout_s", values.parse_positive_number, d.graceful_timeout_s
        ),
        keep_alive_timeout_s=table.get(
            "keep_alive_timeout_s", values.parse_positive_number, d.keep_alive_timeout_s
        ),
        keep_alive_max_requests=table.get(
            "keep_alive_max_requests", values.parse_positive_int, d.keep_alive_max_requests
        ),
        max_request_body_bytes=table.get(
            "max_request_body_bytes", values.parse_positive_int, d.max_request_body_bytes
        ),
        max_audio_body_bytes=table.get(
            "max_audio_body_bytes", values.parse_positive_int, d.max_audio_body_bytes
        ),
        max_file_body_bytes=table.get(
            "max_file_body_bytes", values.parse_positive_int, d.max_file_body_bytes
        ),
        max_vision_body_bytes=table.get(
            "max_vision_body_bytes", values.parse_positive_int, d.max_vision_body_bytes
        ),
        access_log=table.get("access_log", values.parse_bool, d.access_log),
        sse_keepalive_s=table.get(
            "sse_keepalive_s", values.parse_positive_number, d.sse_keepalive_s
        ),
        http_server=table.get("http_server", values.one_of(schema.HTTP_SERVERS), d.http_server),
        request_head_timeout_s=table.get(
            "request_head_timeout_s", values.parse_positive_number, d.request_head_timeout_s
        ),
        request_body_timeout_s=table.get(
            "request_body_timeout_s", values.parse_positive_number, d.request_body_timeout_s
        ),
        max_head_bytes=table.get("max_head_bytes", values.parse_head_bytes, d.max_head_bytes),
        max_headers=table.get("max_headers", values.parse_header_count, d.max_headers),
        max_connections=table.get("max_connections", values.parse_positive_int, d.max_connections),
        websocket_max_message_bytes=table.get(
            "websocket_max_message_bytes",
            values.parse_positive_int,
            d.websocket_max_message_bytes,
        ),
        keyring_check_interval_s=table.get(
            "keyring_check_interval_s", values.parse_positive_number, d.keyring_check_interval_s
        ),
    )
    table.finish()
    return server


def parse_provider(table: Table, environ: Mapping[str, str]) -> ProviderConfig:
    name = table.require("name", values.parse_provider_name)
    kind = table.require("kind", values.one_of(schema.PROVIDER_KINDS))
    base_url = table.require("base_url", values.parse_http_url)
    api_key = table.get("api_key", values.parse_header_secret, None)
    api_key_env = table.get("api_key_env", values.parse_env_var_name, None)
    if api_key_env is not None:
        if api_key is not None:
            raise table.error("api_key_env", "set either api_key or api_key_env, not both")
        api_key = environ.get(api_key_env) or None  # unset: the provider is keyless (or BYOK)
        if api_key is not None and not sendable_as_header(api_key):
            raise table.error("api_key_env", f"the variable's value {values.HEADER_SECRET}")
    supports = table.get_list("supports", values.one_of(schema.CAPABILITIES))
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
        max_connections=table.get("max_connections", values.parse_positive_int, d.max_connections),
        max_keepalive_connections=table.get(
            "max_keepalive_connections", values.parse_positive_int, d.max_keepalive_connections
        ),
        connect_timeout_s=table.get(
            "connect_timeout_s", values.parse_positive_number, d.connect_timeout_s
        ),
        read_timeout_s=table.get("read_timeout_s", values.parse_positive_number, d.read_timeout_s),
        keepalive_expiry_s=table.get(
            "keepalive_expiry_s", values.parse_positive_number, d.keepalive_expiry_s
        ),
        max_response_bytes=table.get(
            "max_response_bytes", values.parse_positive_int, d.max_response_bytes
        ),
    )
    table.finish()
    return provider


def parse_providers(tables: list[Table], environ: Mapping[str, str]) -> tuple[ProviderConfig, ...]:
    providers: list[ProviderConfig] = []
    first: dict[str, str] = {}
    for table in tables:
        provider = parse_provider(table, environ)
        if provider.name in first:
            got, other = values.describe(provider.name), first[provider.name]
            raise table.error("name", f"duplicate provider name {got} (also {other})")
        first[provider.name] = table.key("name")
        providers.append(provider)
    return tuple(providers)


def parse_models(
    tables: list[Table], providers: tuple[ProviderConfig, ...]
) -> tuple[ModelConfig, ...]:
    names = sorted(provider.name for provider in providers)
    models: list[ModelConfig] = []
    first: dict[str, str] = {}
    for table in tables:
        model_id = table.require("id", values.parse_string)
        if model_id in first:
            raise table.error(
                "id", f"duplicate model id {values.describe(model_id)} (also {first[model_id]})"
            )
        first[model_id] = table.key("id")
        provider = table.require("provider", values.parse_string)
        if provider not in names:
            got, configured = values.describe(provider), ", ".join(names) or "none"
            raise table.error(
                "provider", f"no provider named {got} (configured providers: {configured})"
            )
        prices = {name: table.get(name, values.parse_price, None) for name in schema.PRICE_FIELDS}
        translations = table.get("translations", values.parse_bool, None)
        supports = next(p.supports for p in providers if p.name == provider)
        if translations and supports is not None and "audio" not in supports:
            raise table.error(
                "translations",
                f'the provider {values.describe(provider)} does not list "audio" in its '
                "supports, so this model cannot serve translations",
            )
        models.append(
            ModelConfig(
                id=model_id,
                provider=provider,
                upstream=table.get("upstream", values.parse_string, model_id),
                **prices,
                usd_per_image_by=table.get("usd_per_image_by", values.parse_price_table, ()),
                max_document_tokens=table.get(
                    "max_document_tokens", values.parse_document_tokens, None
                ),
                translations=translations,
            )
        )
        table.finish()
    return tuple(models)


def parse_webhooks(table: Table) -> WebhooksConfig:
    d = WebhooksConfig()
    networks = table.get_list("allowed_private_networks", values.parse_cidr)
    webhooks = WebhooksConfig(
        allowed_private_networks=d.allowed_private_networks if networks is None else (*networks,),
        allow_http=table.get("allow_http", values.parse_bool, d.allow_http),
        allowed_ports=tuple(table.get_list("allowed_ports", values.integer_in(1, 65535)) or ()),
        completion_success_sample_rate=table.get(
            "completion_success_sample_rate",
            values.parse_fraction,
            d.completion_success_sample_rate,
        ),
        secret_rotation_overlap_s=table.get(
            "secret_rotation_overlap_s", values.parse_positive_number, d.secret_rotation_overlap_s
        ),
        retention_days=table.get("retention_days", values.parse_positive_number, d.retention_days),
        poll_interval_s=table.get(
            "poll_interval_s", values.parse_positive_number, d.poll_interval_s
        ),
        lease_ttl_s=table.get("lease_ttl_s", values.parse_positive_number, d.lease_ttl_s),
        attempt_timeout_s=table.get(
            "attempt_timeout_s", values.parse_positive_number, d.attempt_timeout_s
        ),
    )
    table.finish()
    return webhooks


def parse_database(table: Table) -> DatabaseConfig:
    timeout = table.get(
        "statement_timeout_s",
        values.number_in(0.01, 3600.0),
        DatabaseConfig.statement_timeout_s,
    )
    table.finish()
    return DatabaseConfig(statement_timeout_s=timeout)


def parse_actors(table: Table) -> dict[str, ActorSettings]:
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


def parse_billing(table: Table) -> BillingConfig:
    d = BillingConfig()
    billing = BillingConfig(
        payment_provider=table.get(
            "payment_provider", values.one_of(schema.PAYMENT_PROVIDERS), d.payment_provider
        ),
        enabled=table.get("enabled", values.parse_bool, d.enabled),
        max_auto_topups_per_day=table.get(
            "max_auto_topups_per_day", values.integer_in(0, 100), d.max_auto_topups_per_day
        ),
    )
    table.finish()
    return billing


def parse_images(
    table: Table, providers: tuple[ProviderConfig, ...], models: tuple[ModelConfig, ...]
) -> ImagesConfig:
    lifetime = table.get(
        "url_lifetime_s", values.integer_in(1, 7 * 86_400), ImagesConfig.url_lifetime_s
    )
    default_model = table.get("default_model", values.parse_string, None)
    table.finish()
    if default_model is not None:
        provider, slash, upstream = default_model.partition("/")
        known = any(m.id == default_model for m in models) or (
            slash and upstream and any(p.name == provider for p in providers)
        )
        if not known:
            raise table.error(
                "default_model",
                f"no [[models]] entry has the id {values.describe(default_model)}, and it is not"
                " <provider>/<upstream model> of a configured provider",
            )
    return ImagesConfig(url_lifetime_s=lifetime, default_model=default_model)


def parse_fine_tuning(table: Table) -> FineTuningConfig:
    d = FineTuningConfig()
    positive = values.parse_positive_number
    config = FineTuningConfig(
        poll_initial_s=table.get("poll_initial_s", positive, d.poll_initial_s),
        poll_max_s=table.get("poll_max_s", positive, d.poll_max_s),
        lease_ttl_s=table.get("lease_ttl_s", positive, d.lease_ttl_s),
        scan_interval_s=table.get("scan_interval_s", positive, d.scan_interval_s),
        max_watched=table.get("max_watched", values.integer_in(1, 100_000), d.max_watched),
        max_example_tokens=table.get(
            "max_example_tokens", values.integer_in(1), d.max_example_tokens
        ),
        events_poll_s=table.get("events_poll_s", positive, d.events_poll_s),
    )
    if config.poll_max_s < config.poll_initial_s:
        raise table.error("poll_max_s", "must be at least poll_initial_s")
    table.finish()
    return config


def parse_files(table: Table, environ: Mapping[str, str]) -> FilesConfig:
    store = table.get("store", values.one_of(schema.BLOB_STORES), FilesConfig.store)
    endpoint = table.get("s3_endpoint_url", values.parse_http_url, None)
    bucket = table.get("s3_bucket", values.parse_bucket, None)
    region = table.get("s3_region", values.parse_region, None)
    prefix = table.get("s3_prefix", values.parse_key_prefix, None)
    free = table.get("free_quota_bytes", values.integer_in(0), FilesConfig.free_quota_bytes)
    pro = table.get("pro_quota_bytes", values.integer_in(0), FilesConfig.pro_quota_bytes)
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
