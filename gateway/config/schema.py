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

import base64
import dataclasses
import ipaddress
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from actors.settings import DEFAULTS as ACTOR_DEFAULTS
from actors.settings import ActorSettings
from protocol.credentials import OPERATOR_PREFIX
from protocol.provider_keys import sendable_as_header

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

BOOTSTRAP_PREFIX = "service_mgmt_"
OPERATOR_KEY_MIN_LENGTH = 32
# RFC 6750's b64token: what a bearer credential may hold without quoting.
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MASK = "***"
# S3's bucket naming rules: 3-63 of lowercase letters, digits, "." and "-", letter or digit at
# both ends (dotted-quad names, also refused by S3, are caught below).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
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
    max_audio_body_bytes: int = 25_000_000  # transcription uploads (the API's 25 MB)
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
class FineTuningConfig:
    """`[fine_tuning]`: how jobs are followed at their providers (docs/fine_tuning.md)."""

    poll_initial_s: float = 1.0  # first wait between two polls of a provider job
    poll_max_s: float = 30.0  # the wait doubles after each poll (and each error) up to this
    lease_ttl_s: float = 60.0  # a job's watcher renews within this, else another instance takes
    scan_interval_s: float = 5.0  # how often an instance looks for jobs nobody watches
    max_watched: int = 200  # jobs one instance watches at once
    max_example_tokens: int = 65_536  # a longer training example fails the job
    events_poll_s: float = 1.0  # an SSE stream of job events looks for new ones this often


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


class InvalidValue(Exception):
    """A value's problem; the caller adds where the value came from."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def describe(value: object, *, secret: bool = False) -> str:
    """The value as TOML would write it (or only its type, for secrets), for `got ...`."""
    kind: str
    text: str | None = None
    if isinstance(value, bool):
        kind, text = "a boolean", "true" if value else "false"
    elif isinstance(value, str):
        shown = value if len(value) <= 80 else value[:77] + "..."
        kind, text = "a string", json.dumps(shown, ensure_ascii=False)
    elif isinstance(value, int):
        kind, text = "an integer", str(value)
    elif isinstance(value, float):
        kind, text = "a float", repr(value)
    elif isinstance(value, list):
        kind = "an array"
    elif isinstance(value, dict):
        kind = "a table"
    else:
        kind = "a date/time"
    return kind if secret or text is None else text


def parse_string(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidValue(f"must be a string, got {describe(value)}")
    if not value.strip():
        raise InvalidValue("must not be empty")
    return value


def parse_secret(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidValue(f"must be a string, got {describe(value, secret=True)}")
    if not value.strip():
        raise InvalidValue("must not be empty")
    return value


HEADER_SECRET = (
    "must be visible ASCII characters only (no spaces or controls): it is sent as a header"
)


def parse_header_secret(value: object) -> str:
    """A provider's API key: sent upstream as a header value, so visible ASCII only."""
    secret = parse_secret(value)
    if not sendable_as_header(secret):
        raise InvalidValue(HEADER_SECRET)
    return secret


def integer_in(low: int, high: int | None = None) -> Callable[[object], int]:
    wanted = f"an integer of at least {low}" if high is None else f"an integer from {low} to {high}"

    def convert(value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            if value >= low and (high is None or value <= high):
                return value
        raise InvalidValue(f"must be {wanted}, got {describe(value)}")

    return convert


def parse_positive_number(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value) and value > 0:
            return float(value)
    raise InvalidValue(f"must be a finite number greater than 0, got {describe(value)}")


def number_in(low: float, high: float) -> Callable[[object], float]:
    def convert(value: object) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if math.isfinite(value) and low <= value <= high:
                return float(value)
        raise InvalidValue(f"must be a number from {low:g} to {high:g}, got {describe(value)}")

    return convert


def parse_fraction(value: object) -> float:
    """A number from 0 to 1 inclusive (a share, a sampling rate)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    raise InvalidValue(f"must be a number from 0 to 1, got {describe(value)}")


def parse_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidValue(f"must be true or false, got {describe(value)}")
    return value


def parse_price(value: object) -> Decimal:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidValue(f"must be a number of US dollars, got {describe(value)}")
    # str() first: the float 0.15 is not exactly 0.15, but its shortest repr is what was written.
    price = Decimal(str(value))
    if price < 0:
        raise InvalidValue(f"must not be negative, got {describe(value)}")
    return price.copy_abs()  # exact; turns -0.0 into 0.0


def parse_price_table(value: object) -> tuple[tuple[str, Decimal], ...]:
    """An inline table of prices by name: `{ "1024x1024" = 0.04, "1024x1024/hd" = 0.08 }`."""
    if not isinstance(value, dict):
        raise InvalidValue(f"must be a table of prices by name, got {describe(value)}")
    table: list[tuple[str, Decimal]] = []
    for name, price in value.items():
        try:
            table.append((name, parse_price(price)))
        except InvalidValue as exc:
            raise InvalidValue(f"{describe(name)} {exc.problem}") from None
    return tuple(table)


def parse_document_tokens(value: object) -> int:
    """The API: a reranker's per-document token maximum is from 512 to 16,000."""
    if isinstance(value, int) and not isinstance(value, bool) and 512 <= value <= 16_000:
        return value
    raise InvalidValue(f"must be an integer from 512 to 16000, got {describe(value)}")


def one_of(choices: frozenset[str] | tuple[str, ...]) -> Callable[[object], str]:
    listed = ", ".join(choices if isinstance(choices, tuple) else sorted(choices))

    def convert(value: object) -> str:
        if isinstance(value, str) and value in choices:
            return value
        raise InvalidValue(f"must be one of {listed}, got {describe(value)}")

    return convert


def parse_log_level(value: object) -> str:
    if isinstance(value, str) and value.upper() in LOG_LEVELS:
        return value.upper()
    raise InvalidValue(f"must be one of {', '.join(LOG_LEVELS)}, got {describe(value)}")


def parse_provider_name(value: object) -> str:
    name = parse_string(value)
    if not _PROVIDER_NAME.fullmatch(name):
        raise InvalidValue(
            "must be lowercase letters, digits, '_' and '-', starting with a letter or digit, "
            f"got {describe(name)}"
        )
    return name


def parse_env_var_name(value: object) -> str:
    # Not echoed: a common mistake is pasting the key itself here.
    name = parse_secret(value)
    if not _ENV_NAME.fullmatch(name):
        raise InvalidValue(
            "must be the name of an environment variable (letters, digits and '_'), "
            "not the key itself"
        )
    return name


def parse_http_url(value: object) -> str:
    url = parse_string(value)
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError:
        valid = False
    if not valid:
        raise InvalidValue(f"must be an http:// or https:// URL, got {describe(redact_url(url))}")
    return url.rstrip("/")


def parse_database_url(value: object) -> str:
    if isinstance(value, str):
        if value.startswith("postgres://"):
            value = "postgresql://" + value.removeprefix("postgres://")
        if value.startswith("postgresql://"):
            return value
        if value.startswith("sqlite:///") and value != "sqlite:///":
            return value
    got = describe(redact_url(value) if isinstance(value, str) else value)
    raise InvalidValue(f"must be sqlite:///<path> or postgresql://..., got {got}")


def parse_redis_url(value: object) -> str:
    if isinstance(value, str) and value.startswith(("redis://", "rediss://", "unix://")):
        return value
    got = describe(redact_url(value) if isinstance(value, str) else value)
    raise InvalidValue(f"must be a redis://, rediss:// or unix:// URL, got {got}")


def parse_path(value: object) -> Path:
    return Path(parse_string(value))


def parse_master_key(value: object) -> bytes:
    if isinstance(value, str):
        try:
            key = base64.b64decode(value.strip(), validate=True)
        except ValueError:  # binascii.Error, or non-ASCII text
            key = b""
        if len(key) == 32:
            return key
    raise InvalidValue("must be base64 of exactly 32 bytes (e.g. from `openssl rand -base64 32`)")


def parse_bootstrap_key(value: object) -> str:
    if isinstance(value, str) and value.startswith(BOOTSTRAP_PREFIX):
        if len(value) - len(BOOTSTRAP_PREFIX) >= 16:
            return value
    raise InvalidValue(f'must be "{BOOTSTRAP_PREFIX}" followed by at least 16 characters')


def parse_operator_keys(value: object) -> tuple[str, ...]:
    """One operator key, or several separated by commas (rotation: add the new one, move
    clients over, remove the old one). Problems name the key's position, never its text."""
    if not isinstance(value, str):
        raise InvalidValue(f"must be a string, got {describe(value, secret=True)}")
    keys = tuple(key.strip() for key in value.split(","))
    for position, key in enumerate(keys, 1):
        where = f"key {position} of {len(keys)}" if len(keys) > 1 else "the key"
        if not key:
            raise InvalidValue(f"has an empty key at position {position} (a stray comma?)")
        if not key.startswith(OPERATOR_PREFIX):
            raise InvalidValue(f'{where} must start with "{OPERATOR_PREFIX}"')
        if len(key) < OPERATOR_KEY_MIN_LENGTH:
            raise InvalidValue(
                f"{where} must be at least {OPERATOR_KEY_MIN_LENGTH} characters long, "
                f"got {len(key)} (e.g. {OPERATOR_PREFIX} and `openssl rand -hex 24`)"
            )
        if not _BEARER_TOKEN.fullmatch(key):
            raise InvalidValue(
                f"{where} may hold only ASCII letters, digits and - . _ ~ + / (and = at the "
                "end), as a bearer token"
            )
    return keys


def parse_bucket(value: object) -> str:
    if isinstance(value, str) and _BUCKET.fullmatch(value) and ".." not in value:
        if not re.fullmatch(r"[0-9]+(\.[0-9]+){3}", value):
            return value
    raise InvalidValue(
        "must be an S3 bucket name (3-63 lowercase letters, digits, '.' and '-', a letter or "
        f"digit at both ends), got {describe(value)}"
    )


_PREFIX_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"


def parse_key_prefix(value: object) -> str:
    """An S3 key prefix: blob-key segments (storage/blobs/interface.py), each followed by "/"."""
    if isinstance(value, str) and re.fullmatch(rf"(?:{_PREFIX_SEGMENT}/){{1,4}}", value):
        return value
    raise InvalidValue(
        "must be 1 to 4 segments of letters, digits, '_', '.' and '-' (starting with a letter or"
        f" digit), each followed by '/', e.g. \"gateway/\"; got {describe(value)}"
    )


def parse_region(value: object) -> str:
    if isinstance(value, str) and _REGION.fullmatch(value):
        return value
    raise InvalidValue(f'must be a region name such as "us-east-1", got {describe(value)}')


def parse_cidr(value: object) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if isinstance(value, str):
        try:
            return ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            pass
    raise InvalidValue(f'must be a CIDR network such as "127.0.0.0/8", got {describe(value)}')


def from_env_int(convert: Callable[[object], int]) -> Callable[[object], int]:
    """Adapt an integer converter to environment strings; "80a" is reported as given."""

    def from_env(value: object) -> int:
        if isinstance(value, str) and re.fullmatch(r"[0-9]+", value):
            return convert(int(value))
        return convert(value)

    return from_env


parse_port = integer_in(0, 65535)  # 0: any free port, for tests
parse_positive_int = integer_in(1)
parse_head_bytes = integer_in(1024, 1_048_576)  # a request line must fit; past 1 MiB is abuse
parse_header_count = integer_in(1, 10_000)
