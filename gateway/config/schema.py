"""What a valid configuration is: the frozen dataclasses, their defaults, and one parser per kind
of value.

A parser takes a raw value (from TOML, or an environment variable's text) and returns the typed
value or raises `InvalidValue` with the problem; it does not know where the value came from, so
`gateway.config` (which reads files and the environment and re-exports the dataclasses) adds that.
Nothing here does I/O. Neither the problems nor the `__repr__` methods ever show a secret (provider
API keys, the master key, the bootstrap management key, passwords inside database or Redis URLs),
so a config may be logged or printed as is.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from actors.fine_tuning.settings import FineTuningConfig
from actors.settings import DEFAULTS as ACTOR_DEFAULTS
from actors.settings import ActorSettings
from protocol.audio.transcription import MAX_FILE_BYTES as AUDIO_MAX_FILE_BYTES

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PROVIDER_KINDS = frozenset({"openai", "anthropic", "cohere", "ollama", "vllm"})
CAPABILITIES = frozenset(
    {"chat", "embeddings", "audio", "images", "fine_tuning", "responses", "rerank"}
)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
PAYMENT_PROVIDERS = frozenset({"test"})
BLOB_STORES = ("local", "s3")
PRICE_FIELDS = (
    "input_usd_per_mtok",
    "output_usd_per_mtok",
    "usd_per_image",
    "usd_per_search_unit",
    "usd_per_1k_chars",
    "usd_per_minute",
    "training_usd_per_mtok",
)

# RFC 6750's b64token: what a bearer credential may hold without quoting.
_MASK = "***"
# S3's bucket naming rules: 3-63 of lowercase letters, digits, "." and "-", letter or digit at
# both ends (dotted-quad names, also refused by S3, are caught below).
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """Return `url` with the password (in the authority or a `password=` query parameter) as `***`.

    For printing the database or Redis in use; never raises, whatever the input.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = len(rest)
    for delimiter in "/?#":
        index = rest.find(delimiter)
        if index != -1:
            end = min(end, index)
    authority, tail = rest[:end], rest[end:]
    # rpartition: an unencoded "@" in the user name or password stays on the userinfo side.
    userinfo, at, hostport = authority.rpartition("@")
    if at and ":" in userinfo:
        user = userinfo.split(":", 1)[0]
        authority = f"{user}:{_MASK}@{hostport}"
    tail = _QUERY_PASSWORD.sub(lambda match: match.group(1) + _MASK, tail)
    return f"{scheme}://{authority}{tail}"


def _safe_repr(
    obj: DataclassInstance,
    masked: frozenset[str] = frozenset(),
    urls: frozenset[str] = frozenset(),
) -> str:
    parts = []
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if field.name in masked and value is not None and value != ():
            text = repr(_MASK)
        elif field.name in urls and isinstance(value, str):
            text = repr(redact_url(value))
        else:
            text = repr(value)
        parts.append(f"{field.name}={text}")
    return f"{type(obj).__name__}({', '.join(parts)})"


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    graceful_timeout_s: float = 30.0  # drain time for in-flight requests and streams on SIGTERM
    keep_alive_timeout_s: float = 75.0
    # Hypercorn's default of 1000 would cut off busy keep-alive clients.
    keep_alive_max_requests: int = 1_000_000
    max_request_body_bytes: int = 1_048_576  # JSON bodies on management and inference routes
    max_audio_body_bytes: int = AUDIO_MAX_FILE_BYTES  # transcription uploads (the API's 25 MB)
    max_file_body_bytes: int = 512_000_000  # file uploads (the API's 512 MB)
    max_vision_body_bytes: int = 20_000_000  # vision file uploads (the API's 20 MB)
    access_log: bool = True
    sse_keepalive_s: float = 15.0  # `: keepalive` after this much upstream silence
    # "builtin": the lean HTTP/1.1 server (gateway/server/http1.py); "hypercorn": h11 + h2c.
    http_server: str = "builtin"
    # Built-in server limits (docs/operations.md says why each default is what it is).
    request_head_timeout_s: float = 10.0  # first byte to end of head: slowloris gets 408
    request_body_timeout_s: float = 30.0  # longest silence inside a request body
    max_head_bytes: int = 65_536  # request line + headers: 431 past it
    max_headers: int = 100  # header lines: 431 past it
    max_connections: int = 10_000  # open client connections; more wait in the backlog
    websocket_max_message_bytes: int = 1_048_576  # a larger message closes with 1009
    # How often the keyring is checked for a rotation away from this instance's master key.
    keyring_check_interval_s: float = 30.0


HTTP_SERVERS = ("builtin", "hypercorn")


@dataclass(frozen=True, repr=False)
class ProviderConfig:
    name: str
    kind: str
    base_url: str  # http(s), no trailing slash
    api_key: str | None  # resolved from `api_key` or the variable named by `api_key_env`
    supports: frozenset[str] | None  # None: not restricted
    max_connections: int = 100
    max_keepalive_connections: int = 20
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 600.0
    # An idle pooled connection older than this is closed, not reused: NATs and load balancers
    # drop idle flows silently (often after 60-350 s), and a request on a dropped one waits
    # the whole read timeout. 30 s is under those, and still reuses under any steady traffic.
    keepalive_expiry_s: float = 30.0
    # A non-streamed answer is held whole: 64 MiB bounds that and still fits large embedding
    # batches (2,048 inputs x 1,536 float dims is ~40 MB of JSON). Streams are read per chunk.
    max_response_bytes: int = 64 * 1024 * 1024
    api_key_env: str | None = None  # the variable named, kept to report it when unset

    def __repr__(self) -> str:
        return _safe_repr(self, masked=frozenset({"api_key"}))


@dataclass(frozen=True)
class ModelConfig:
    id: str
    provider: str
    upstream: str
    input_usd_per_mtok: Decimal | None = None
    output_usd_per_mtok: Decimal | None = None
    usd_per_image: Decimal | None = None
    usd_per_search_unit: Decimal | None = None
    usd_per_1k_chars: Decimal | None = None
    usd_per_minute: Decimal | None = None
    training_usd_per_mtok: Decimal | None = None
    # Images priced by size, or size and quality: ("1024x1792", 0.08), ("1024x1024/hd", 0.08).
    # A request's most specific match wins, then `usd_per_image` (gateway/images/).
    usd_per_image_by: tuple[tuple[str, Decimal], ...] = ()
    # Rerank: the most tokens one document may hold (the API: a per-model maximum, 512 to 16,000);
    # None: the gateway's default (gateway/rerank/).
    max_document_tokens: int | None = None
    # May serve /v1/audio/translations; None: by the upstream name (`whisper…` translate:
    # protocol/audio/transcription.supports_translation), for configs written before the key.
    translations: bool | None = None


@dataclass(frozen=True)
class ImagesConfig:
    """`[images]`: generated images answered as `url` (docs/images.md)."""

    url_lifetime_s: int = 3600  # the API: a `url` result is valid for 1 hour
    # The model of an edit or variation whose form has no `model` (OpenAI's API lets it be
    # omitted): a [[models]] id or `<provider>/<upstream>`. None: `model` is required.
    default_model: str | None = None


@dataclass(frozen=True)
class WebhooksConfig:
    """`[webhooks]`: delivery of the events outbox to subscriptions (docs/webhooks.md)."""

    # Loopback and private addresses deliveries may reach (all refused by default: SSRF).
    allowed_private_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    allow_http: bool = False  # subscriptions to http:// URLs (tests, a receiver on the host)
    # Ports a webhook URL may name besides its scheme's own (443; 80 with allow_http). Any port
    # is allowed for a host whose addresses are all inside allowed_private_networks.
    allowed_ports: tuple[int, ...] = ()
    completion_success_sample_rate: float = 0.1  # share of successes written as events, 0..1
    secret_rotation_overlap_s: float = 86_400.0  # the old secret still signs for this long
    retention_days: float = 30.0  # delivered events and attempts older than this are removed
    poll_interval_s: float = 0.5  # how often each instance looks for new events and leases
    lease_ttl_s: float = 15.0  # a subscription's owner must renew within this, else another takes
    attempt_timeout_s: float = 10.0  # one delivery attempt, connect to response head


@dataclass(frozen=True)
class DatabaseConfig:
    """`[database]`: bounds on every database call (docs/operations.md, "When the database
    does not answer")."""

    # Connect, pool acquire, each statement and COMMIT: past this the call fails (503
    # database_unavailable, Retry-After) instead of waiting on a server that does not answer.
    statement_timeout_s: float = 10.0


@dataclass(frozen=True)
class BillingConfig:
    payment_provider: str = "test"
    # Reserve, charge and write usage to the ledger on inference requests. Off: requests are
    # neither checked against the balance nor billed (top-ups and the ledger still work).
    enabled: bool = True
    # Automatic top-ups (auto-replenish) per organization and UTC day, across instances; 0: none.
    max_auto_topups_per_day: int = 3


@dataclass(frozen=True, repr=False)
class FilesConfig:
    """`[files]`: where uploaded files' (encrypted) content lives.

    "local": `<data_dir>/blobs/` on this host (the embedded default); "s3": a bucket on any
    S3-compatible store, shared by every instance. The S3 credentials come from the standard
    `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` variables only (None: boto3's own chain, e.g.
    an instance role) and are never shown.
    """

    store: str = "local"
    # Stored bytes an organization may hold, per plan (the API's 100 GB Free, 1 TB Pro).
    free_quota_bytes: int = 100_000_000_000
    pro_quota_bytes: int = 1_000_000_000_000
    s3_endpoint_url: str | None = None  # None: AWS S3 itself
    s3_bucket: str | None = None  # required for "s3"; created at start if missing
    s3_region: str | None = None
    s3_prefix: str = (
        ""  # prepended to every object key: instances of several gateways share a bucket
    )
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None

    def __repr__(self) -> str:
        return _safe_repr(
            self,
            masked=frozenset({"s3_access_key_id", "s3_secret_access_key"}),
            urls=frozenset({"s3_endpoint_url"}),
        )

    def quota_bytes(self, plan: str) -> int:
        return self.pro_quota_bytes if plan == "pro" else self.free_quota_bytes


@dataclass(frozen=True, repr=False)
class Config:
    source: str | None  # the file the config came from, or None for pure defaults
    database_url: str  # sqlite:///... or postgresql://... (postgres:// is normalised)
    redis_url: str | None
    data_dir: Path
    master_key: bytes | None  # 32 bytes
    public_base_url: str | None  # no trailing slash
    bootstrap_management_key: str | None
    server: ServerConfig
    providers: tuple[ProviderConfig, ...]
    models: tuple[ModelConfig, ...]
    webhooks: WebhooksConfig
    billing: BillingConfig
    log_level: str = "INFO"
    files: FilesConfig = FilesConfig()
    images: ImagesConfig = ImagesConfig()
    fine_tuning: FineTuningConfig = FineTuningConfig()
    database: DatabaseConfig = DatabaseConfig()
    # `[actors.<kind>]`: supervision and inbox knobs per actor kind (actors/settings.py).
    actors: Mapping[str, ActorSettings] = dataclasses.field(
        default_factory=lambda: dict(ACTOR_DEFAULTS)
    )
    # GATEWAY_OPERATOR_KEY: the credentials of the instance-wide routes (`/v1/admin/*`); none:
    # those routes are disabled.
    operator_keys: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return _safe_repr(
            self,
            masked=frozenset({"master_key", "bootstrap_management_key", "operator_keys"}),
            urls=frozenset({"database_url", "redis_url"}),
        )
