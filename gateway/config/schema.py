"""What a valid configuration is: frozen `msgspec.Struct`s whose field defaults are the defaults
(the one place each is written) and whose types (values.py) carry the rules.

Unknown keys are refused (`forbid_unknown_fields`). Checks one field's type cannot say live in a
`__post_init__` that raises `FieldProblem` naming the field; checks across tables are the
loader's (loader.py). Neither errors nor `__repr__` ever show a secret (provider API keys, the
master key, the bootstrap management key, passwords inside URLs), so a config may be logged or
printed as is.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from msgspec import Meta, field

from actors.fine_tuning.settings import FineTuningConfig
from actors.settings import DEFAULTS as ACTOR_DEFAULTS
from actors.settings import ActorSettings
from gateway.config.policies import CacheConfig, GuardrailConfig, MirrorConfig
from gateway.config.routing import (
    DeploymentConfig,
    RetryStatus,
    Strategy,
    check_routing,
)
from gateway.config.values import (
    CAPABILITY_NAMES,
    LOG_LEVELS,
    PRICE_FIELDS,
    ApiKey,
    BootstrapKey,
    Bucket,
    Capability,
    DatabaseUrl,
    EnvName,
    FieldProblem,
    KeyPrefix,
    MasterKey,
    Network,
    NonEmpty,
    Port,
    Positive,
    PositiveInt,
    Price,
    ProviderKind,
    ProviderName,
    RedisUrl,
    Region,
    check_http_url,
    describe,
    exact_price,
    force,
    normal_database_url,
    safe_repr,
)
from gateway.config.values import Table as _Table
from protocol.audio.transcription import MAX_FILE_BYTES as AUDIO_MAX_FILE_BYTES


class ServerConfig(_Table, frozen=True):
    host: NonEmpty = "127.0.0.1"
    port: Port = 8080
    workers: PositiveInt = 1
    graceful_timeout_s: Positive = 30.0  # drain time for in-flight requests and streams on SIGTERM
    keep_alive_timeout_s: Positive = 75.0
    # Hypercorn's default of 1000 would cut off busy keep-alive clients.
    keep_alive_max_requests: PositiveInt = 1_000_000
    max_request_body_bytes: PositiveInt = 1_048_576  # JSON bodies on management and inference
    max_audio_body_bytes: PositiveInt = AUDIO_MAX_FILE_BYTES  # transcription uploads (25 MB)
    max_file_body_bytes: PositiveInt = 512_000_000  # file uploads (the API's 512 MB)
    max_vision_body_bytes: PositiveInt = 20_000_000  # vision file uploads (the API's 20 MB)
    access_log: bool = True
    sse_keepalive_s: Positive = 15.0  # `: keepalive` after this much upstream silence
    # "builtin": the lean HTTP/1.1 server (gateway/server/http1.py); "hypercorn": h11 + h2c.
    http_server: Literal["builtin", "hypercorn"] = "builtin"
    # Built-in server limits (docs/operations.md says why each default is what it is).
    request_head_timeout_s: Positive = 10.0  # first byte to end of head: slowloris gets 408
    request_body_timeout_s: Positive = 30.0  # longest silence inside a request body
    # Request line + headers: 431 past it. A request line must fit; past 1 MiB is abuse.
    max_head_bytes: Annotated[int, Meta(ge=1024, le=1_048_576)] = 65_536
    max_headers: Annotated[int, Meta(ge=1, le=10_000)] = 100  # header lines: 431 past it
    max_connections: PositiveInt = 10_000  # open client connections; more wait in the backlog
    websocket_max_message_bytes: PositiveInt = 1_048_576  # a larger message closes with 1009
    # How often the keyring is checked for a rotation away from this instance's master key.
    keyring_check_interval_s: Positive = 30.0


class ProviderConfig(_Table, frozen=True):
    name: ProviderName
    kind: ProviderKind  # wire format
    base_url: str  # http(s), no trailing slash
    # From `api_key` or the variable named by `api_key_env` (the loader resolves it).
    api_key: ApiKey | None = None
    supports: frozenset[Capability] | None = None  # None: not restricted
    max_connections: PositiveInt = 100
    max_keepalive_connections: PositiveInt = 20
    connect_timeout_s: Positive = 5.0
    read_timeout_s: Positive = 600.0
    # An idle pooled connection older than this is closed, not reused: NATs and load balancers
    # drop idle flows silently (often after 60-350 s), and a request on a dropped one waits
    # the whole read timeout. 30 s is under those, and still reuses under any steady traffic.
    keepalive_expiry_s: Positive = 30.0
    # A non-streamed answer is held whole: 64 MiB bounds that and still fits large embedding
    # batches (2,048 inputs x 1,536 float dims is ~40 MB of JSON). Streams are read per chunk.
    max_response_bytes: PositiveInt = 64 * 1024 * 1024
    api_key_env: EnvName | None = None  # the variable named, kept to report it when unset

    def __post_init__(self) -> None:
        check_http_url(self, "base_url")
        if self.supports is not None and not self.supports:
            raise FieldProblem(
                "supports", f"must list at least one of {', '.join(CAPABILITY_NAMES)}"
            )

    def __repr__(self) -> str:
        return safe_repr(self, frozenset({"api_key"}), frozenset())


class ModelConfig(_Table, frozen=True):
    """A `[[models]]` entry: one deployment (`provider`, `upstream`) or several (`deployments`,
    gateway/config/routing.py), its prices, and its routing policy."""

    id: NonEmpty
    provider: str = ""  # a [[providers]] name; empty with `deployments`
    upstream: str = ""  # empty: the same as `id` (one deployment)
    input_usd_per_mtok: Price | None = None
    output_usd_per_mtok: Price | None = None
    usd_per_image: Price | None = None
    usd_per_search_unit: Price | None = None
    usd_per_1k_chars: Price | None = None
    usd_per_minute: Price | None = None
    training_usd_per_mtok: Price | None = None
    # Images priced by size, or size and quality: ("1024x1792", 0.08), ("1024x1024/hd", 0.08),
    # written as an inline table. A request's most specific match wins, then `usd_per_image`.
    usd_per_image_by: Annotated[
        tuple[tuple[str, Price], ...], Meta(description="a table of prices by name")
    ] = ()
    # Rerank: the most tokens one document may hold (the API: a per-model maximum, 512 to 16,000);
    # None: the gateway's default (gateway/rerank/).
    max_document_tokens: Annotated[int, Meta(ge=512, le=16_000)] | None = None
    # May serve /v1/audio/translations; None: by the upstream name (`whisper…` translate:
    # protocol/audio/transcription.supports_translation), for configs written before the key.
    translations: bool | None = None
    # Routing (gateway/config/routing.py, docs/routing.md).
    deployments: tuple[DeploymentConfig, ...] = ()
    strategy: Strategy = "priority"
    fallbacks: tuple[NonEmpty, ...] = ()  # other model ids, in order, when every deployment failed
    max_attempts: Annotated[int, Meta(ge=1, le=20)] = 3  # upstream attempts per request
    retry_budget_s: Positive = 30.0  # no new attempt starts after this
    retry_on_status: tuple[RetryStatus, ...] = (429, 500, 502, 503, 504)
    stream_failover: bool = True  # continue a broken stream on another deployment
    cooldown_s: Positive = 30.0  # a tripped deployment rests this long, doubling on repeat trips
    max_cooldown_s: Positive = 600.0  # the doubling stops here
    trip_failures: PositiveInt = 3  # failures among the last `trip_window` attempts trip it
    trip_window: PositiveInt = 5
    # Policies (gateway/config/policies.py, docs/cache.md, docs/plugins.md).
    cache: bool | None = None  # None: `[cache] enabled`
    cache_ttl_s: Positive | None = None  # None: `[cache] ttl_s`
    cache_hit_usd_per_mtok: Price | None = None  # an answer from the cache, per token (None: 0)
    mirrors: tuple[MirrorConfig, ...] = ()

    def __post_init__(self) -> None:
        check_routing(self)
        if self.deployments:
            for name in ("provider", "upstream"):
                if getattr(self, name):
                    raise FieldProblem(name, "is set on each of `deployments` instead")
        elif not self.provider.strip():
            raise FieldProblem("provider", "is required (or `deployments`)")
        elif not self.upstream:
            force(self, "upstream", self.id)
        elif not self.upstream.strip():
            raise FieldProblem("upstream", "must not be blank")
        for name in PRICE_FIELDS:
            value = getattr(self, name)
            if value is not None:
                try:
                    force(self, name, exact_price(value))
                except ValueError as exc:
                    raise FieldProblem(name, str(exc)) from None
        table = []
        for size, value in self.usd_per_image_by:
            try:
                table.append((size, exact_price(value)))
            except ValueError as exc:
                raise FieldProblem("usd_per_image_by", f"{describe(size)} {exc}") from None
        force(self, "usd_per_image_by", tuple(table))


class ImagesConfig(_Table, frozen=True):
    """`[images]`: generated images answered as `url` (docs/images.md)."""

    # The API: a `url` result is valid for 1 hour.
    url_lifetime_s: Annotated[int, Meta(ge=1, le=7 * 86_400)] = 3600
    # The model of an edit or variation whose form has no `model` (OpenAI's API lets it be
    # omitted): a [[models]] id or `<provider>/<upstream>`. None: `model` is required.
    default_model: NonEmpty | None = None


class WebhooksConfig(_Table, frozen=True):
    """`[webhooks]`: delivery of the events outbox to subscriptions (docs/webhooks.md)."""

    # Loopback and private addresses deliveries may reach (all refused by default: SSRF).
    allowed_private_networks: tuple[Network, ...] = ()
    allow_http: bool = False  # subscriptions to http:// URLs (tests, a receiver on the host)
    # Ports a webhook URL may name besides its scheme's own (443; 80 with allow_http). Any port
    # is allowed for a host whose addresses are all inside allowed_private_networks.
    allowed_ports: tuple[Annotated[int, Meta(ge=1, le=65535)], ...] = ()
    # Share of successes written as events.
    completion_success_sample_rate: Annotated[float, Meta(ge=0, le=1)] = 0.1
    secret_rotation_overlap_s: Positive = 86_400.0  # the old secret still signs for this long
    retention_days: Positive = 30.0  # delivered events and attempts older than this are removed
    poll_interval_s: Positive = 0.5  # how often each instance looks for new events and leases
    lease_ttl_s: Positive = 15.0  # a subscription's owner must renew within this, else another
    attempt_timeout_s: Positive = 10.0  # one delivery attempt, connect to response head


class DatabaseConfig(_Table, frozen=True):
    """`[database]`: bounds on every database call (docs/operations.md, "When the database
    does not answer")."""

    # Connect, pool acquire, each statement and COMMIT: past this the call fails (503
    # database_unavailable, Retry-After) instead of waiting on a server that does not answer.
    statement_timeout_s: Annotated[float, Meta(ge=0.01, le=3600)] = 10.0


class BillingConfig(_Table, frozen=True):
    """`[billing]` (docs/billing.md). "test" takes no money (development and tests only: refused
    when GATEWAY_ENV = production); "stripe" charges through Stripe with STRIPE_SECRET_KEY and
    verifies Stripe's webhooks with STRIPE_WEBHOOK_SECRET (both from the environment only)."""

    payment_provider: Literal["test", "stripe"] = "test"
    # Stripe's API address: only for a simulator (bench/stripe/); None is Stripe itself.
    stripe_api_base: str | None = None
    # How often the reconciler lists Stripe's recent PaymentIntents to credit any succeeded one
    # the ledger misses, and how far back it looks (actors/payment_reconciler.py).
    reconcile_interval_s: Annotated[float, Meta(ge=1, le=86_400)] = 300.0
    reconcile_window_s: Annotated[float, Meta(ge=60, le=30 * 86_400)] = 3 * 86_400.0
    stripe_secret_key: str | None = None  # from STRIPE_SECRET_KEY only
    stripe_webhook_secret: str | None = None  # from STRIPE_WEBHOOK_SECRET only
    # Reserve, charge and write usage to the ledger on inference requests. Off: requests are
    # neither checked against the balance nor billed (top-ups and the ledger still work).
    enabled: bool = True
    # Automatic top-ups (auto-replenish) per organization and UTC day, across instances; 0: none.
    max_auto_topups_per_day: Annotated[int, Meta(ge=0, le=100)] = 3

    def __post_init__(self) -> None:
        check_http_url(self, "stripe_api_base")
        if self.payment_provider != "stripe" and self.stripe_api_base is not None:
            raise FieldProblem("stripe_api_base", 'applies only with payment_provider = "stripe"')

    def __repr__(self) -> str:
        masked = frozenset({"stripe_secret_key", "stripe_webhook_secret"})
        return safe_repr(self, masked, frozenset({"stripe_api_base"}))


_S3_ONLY = ("s3_endpoint_url", "s3_bucket", "s3_region", "s3_prefix")


class FilesConfig(_Table, frozen=True):
    """`[files]`: where uploaded files' (encrypted) content lives.

    "local": `<data_dir>/blobs/` on this host (the embedded default); "s3": a bucket on any
    S3-compatible store, shared by every instance. The S3 credentials come from the standard
    `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` variables only (None: boto3's own chain, e.g.
    an instance role) and are never shown.
    """

    store: Literal["local", "s3"] = "local"
    # Stored bytes an organization may hold, per plan (the API's 100 GB Free, 1 TB Pro).
    free_quota_bytes: Annotated[int, Meta(ge=0)] = 100_000_000_000
    pro_quota_bytes: Annotated[int, Meta(ge=0)] = 1_000_000_000_000
    s3_endpoint_url: str | None = None  # None: AWS S3 itself
    s3_bucket: Bucket | None = None  # required for "s3"; created at start if missing
    s3_region: Region | None = None
    # Prepended to every object key (instances of several gateways share a bucket): blob-key
    # segments (storage/blobs/interface.py), each followed by "/".
    s3_prefix: KeyPrefix = ""
    s3_access_key_id: str | None = None  # from AWS_ACCESS_KEY_ID only
    s3_secret_access_key: str | None = None  # from AWS_SECRET_ACCESS_KEY only

    def __post_init__(self) -> None:
        check_http_url(self, "s3_endpoint_url")
        if self.store != "s3":
            for name in _S3_ONLY:
                if getattr(self, name):
                    raise FieldProblem(name, 'applies only with store = "s3"')
        elif self.s3_bucket is None:
            raise FieldProblem("s3_bucket", 'is required with store = "s3"')

    def __repr__(self) -> str:
        masked = frozenset({"s3_access_key_id", "s3_secret_access_key"})
        return safe_repr(self, masked, frozenset({"s3_endpoint_url"}))

    def quota_bytes(self, plan: str) -> int:
        return self.pro_quota_bytes if plan == "pro" else self.free_quota_bytes


class TelemetryConfig(_Table, frozen=True):
    """`[telemetry]`: OpenTelemetry traces, exported with OTLP over HTTP (protobuf) to
    `otlp_endpoint` (docs/operations.md, "Tracing"). Without an endpoint tracing is off and the
    OpenTelemetry SDK is never imported."""

    # The collector's base URL ("http://host:4318"; `/v1/traces` is added unless the URL ends
    # with it). None: tracing is off.
    otlp_endpoint: str | None = None
    # Share of new traces sampled (a client's sampled or unsampled `traceparent` is followed
    # instead). None: 1.0 with an endpoint; it applies only with one.
    sample_ratio: Annotated[float, Meta(ge=0, le=1)] | None = None
    service_name: NonEmpty = "gateway"  # the resource's `service.name`
    # The batch span processor: how long spans wait to be sent together, the longest one
    # export may take, and how many spans may wait (more are dropped, never blocking requests).
    export_delay_s: Positive = 5.0
    export_timeout_s: Positive = 10.0
    max_queue_size: Annotated[int, Meta(ge=1, le=1_000_000)] = 2048
    max_export_batch_size: Annotated[int, Meta(ge=1, le=1_000_000)] = 512

    def __post_init__(self) -> None:
        check_http_url(self, "otlp_endpoint")
        if self.otlp_endpoint is None:
            if self.sample_ratio is not None:
                raise FieldProblem("sample_ratio", "applies only with otlp_endpoint")
        elif self.sample_ratio is None:
            force(self, "sample_ratio", 1.0)
        if self.max_export_batch_size > self.max_queue_size:
            raise FieldProblem("max_export_batch_size", "must not be more than max_queue_size")

    def __repr__(self) -> str:
        return safe_repr(self, frozenset(), frozenset({"otlp_endpoint"}))

    @property
    def traces_url(self) -> str | None:
        """Where spans are posted: the endpoint with `/v1/traces` (unless it ends with it)."""
        url = self.otlp_endpoint
        if url is None or url.endswith("/v1/traces"):
            return url
        return url + "/v1/traces"


class Config(_Table, frozen=True):
    source: str | None = None  # the file the config came from, or None for pure defaults
    # sqlite:///... or postgresql://... (postgres:// is normalised); empty: sqlite under data_dir
    database_url: DatabaseUrl = ""
    redis_url: RedisUrl | None = None
    data_dir: Path = Path("var")
    master_key: MasterKey | None = None  # 32 bytes
    public_base_url: str | None = None  # no trailing slash
    bootstrap_management_key: BootstrapKey | None = None
    server: ServerConfig = ServerConfig()
    providers: tuple[ProviderConfig, ...] = ()
    models: tuple[ModelConfig, ...] = ()
    webhooks: WebhooksConfig = WebhooksConfig()
    billing: BillingConfig = BillingConfig()
    log_level: str = "INFO"  # one of LOG_LEVELS, any case
    files: FilesConfig = FilesConfig()
    images: ImagesConfig = ImagesConfig()
    fine_tuning: FineTuningConfig = FineTuningConfig()
    database: DatabaseConfig = DatabaseConfig()
    guardrails: tuple[GuardrailConfig, ...] = ()
    cache: CacheConfig = CacheConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    # `[actors.<kind>]`: supervision and inbox knobs per actor kind (actors/settings.py).
    actors: Mapping[str, ActorSettings] = field(default_factory=lambda: dict(ACTOR_DEFAULTS))
    # GATEWAY_OPERATOR_KEY: the credentials of the instance-wide routes (`/v1/admin/*`); none:
    # those routes are disabled.
    operator_keys: tuple[str, ...] = ()
    # GATEWAY_ENV: "production" refuses what only development may use (the test payment
    # processor); anything else, or unset, is development.
    environment: str = "development"

    def __post_init__(self) -> None:
        check_http_url(self, "public_base_url")
        force(self, "database_url", normal_database_url(self.database_url, self.data_dir))
        if self.log_level.upper() not in LOG_LEVELS:
            got = describe(self.log_level)
            raise FieldProblem("log_level", f"must be one of {', '.join(LOG_LEVELS)}, got {got}")
        force(self, "log_level", self.log_level.upper())

    def __repr__(self) -> str:
        masked = frozenset({"master_key", "bootstrap_management_key", "operator_keys"})
        return safe_repr(self, masked, frozenset({"database_url", "redis_url"}))
