"""What a valid value is: the kinds of value the schema (schema.py) is written in, each an
`Annotated` type whose `msgspec.Meta` holds the rule and, in `description`, the words for it
(errors.py says "must be <description>, got <value>"); and the few checks a constraint cannot
say, for a `__post_init__`, raising `FieldProblem`. `extra=SECRET` marks a value never shown,
`extra=URL` one shown with its password masked. Nothing here does I/O.
"""

from __future__ import annotations

import ipaddress
import json
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, get_args
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

if TYPE_CHECKING:
    Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
else:  # msgspec takes one custom type per union: the common base, built by the loader's dec_hook
    Network = ipaddress._BaseNetwork
_NETWORK: type = ipaddress._BaseNetwork

_MASK = "***"
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)
SECRET = {"secret": True}  # Meta(extra=...): the value is never shown, only its type
URL = {"url": True}  # Meta(extra=...): shown with its password masked


class Table(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One TOML table: typos are unknown keys, not silently ignored."""


# Kinds of value, each with its rule and the words for it (errors.py).
NonEmpty = Annotated[str, Meta(pattern=r"\S")]
Positive = Annotated[float, Meta(gt=0, le=sys.float_info.max)]  # finite and > 0
PositiveInt = Annotated[int, Meta(ge=1)]
Port = Annotated[int, Meta(ge=0, le=65535)]  # 0: any free port, for tests
Price = Annotated[Decimal, Meta(description="a number of US dollars")]
ProviderKind = Literal["anthropic", "cohere", "ollama", "openai", "vllm"]
Capability = Literal["audio", "chat", "embeddings", "fine_tuning", "images", "rerank", "responses"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
HEADER_SECRET = "visible ASCII characters only (no spaces or controls): it is sent as a header"
BOOTSTRAP_PREFIX = "service_mgmt_"
ApiKey = Annotated[str, Meta(pattern="^[!-~]+$", description=HEADER_SECRET, extra=SECRET)]
# Not echoed: a common mistake is pasting the key itself here.
_ENV_NAME = "the name of an environment variable (letters, digits and '_'), not the key itself"
EnvName = Annotated[
    str, Meta(pattern="^[A-Za-z_][A-Za-z0-9_]*$", description=_ENV_NAME, extra=SECRET)
]
_PROVIDER_NAME = "lowercase letters, digits, '_' and '-', starting with a letter or digit"
ProviderName = Annotated[str, Meta(pattern="^[a-z0-9][a-z0-9_-]*$", description=_PROVIDER_NAME)]
# S3's naming rules, dotted quads refused; region; object key prefix (storage/blobs/interface.py).
_BUCKET = r"^(?![0-9]+(\.[0-9]+){3}$)(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
_BUCKET_WORDS = "an S3 bucket name (3-63 lowercase letters, digits, '.' and '-', a letter or digit"
Bucket = Annotated[str, Meta(pattern=_BUCKET, description=_BUCKET_WORDS + " at both ends)")]
_REGION_WORDS = 'a region name such as "us-east-1"'
Region = Annotated[str, Meta(pattern="^[a-z0-9][a-z0-9-]{0,62}$", description=_REGION_WORDS)]
_PREFIX_WORDS = (
    "1 to 4 segments of letters, digits, '_', '.' and '-' (starting with a letter or digit),"
    " each followed by '/', e.g. \"gateway/\""
)
KeyPrefix = Annotated[
    str, Meta(pattern="^([A-Za-z0-9][A-Za-z0-9_.-]{0,127}/){1,4}$", description=_PREFIX_WORDS)
]
_REDIS = "a redis://, rediss:// or unix:// URL"
# Normalised and checked by `normal_database_url`; empty: the default under data_dir.
DatabaseUrl = Annotated[str, Meta(pattern=r"\S", extra=URL)]
RedisUrl = Annotated[str, Meta(pattern="^(redis|rediss|unix)://", description=_REDIS, extra=URL)]
_BOOTSTRAP = f'"{BOOTSTRAP_PREFIX}" followed by at least 16 characters'
BootstrapKey = Annotated[
    str, Meta(pattern=f"^{BOOTSTRAP_PREFIX}.{{16,}}", description=_BOOTSTRAP, extra=SECRET)
]
_MASTER = "base64 of exactly 32 bytes (e.g. from `openssl rand -base64 32`)"
MasterKey = Annotated[bytes, Meta(min_length=32, max_length=32, description=_MASTER, extra=SECRET)]

LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)
CAPABILITY_NAMES: tuple[str, ...] = get_args(Capability)
PRICE_FIELDS = (
    "input_usd_per_mtok",
    "output_usd_per_mtok",
    "usd_per_image",
    "usd_per_search_unit",
    "usd_per_1k_chars",
    "usd_per_minute",
    "training_usd_per_mtok",
    "cache_hit_usd_per_mtok",
)


class FieldProblem(ValueError):
    """Raised by a `__post_init__`: `key` (relative to the struct) has `problem`."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key
        self.problem = problem


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


def describe(value: object, *, secret: bool = False) -> str:
    """The value as TOML would write it (or only its type, for secrets), for `got ...`."""
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
    elif isinstance(value, list | dict):
        kind = "an array" if isinstance(value, list) else "a table"
    else:
        kind = "a date/time"
    return kind if secret or text is None else text


def force(obj: msgspec.Struct, name: str, value: object) -> None:
    """Set a field of a frozen struct, for a `__post_init__` that normalises a value."""
    msgspec.structs.force_setattr(obj, name, value)


def check_http_url(obj: msgspec.Struct, name: str) -> None:
    """Check the http(s) URL in `obj.<name>` (if set) and drop its trailing slashes."""
    url = getattr(obj, name)
    if url is None:
        return
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError:
        valid = False
    if not valid:
        got = describe(redact_url(url))
        raise FieldProblem(name, f"must be an http:// or https:// URL, got {got}")
    force(obj, name, url.rstrip("/"))


def exact_price(value: Decimal) -> Decimal:
    if not value.is_finite():
        raise ValueError(f"must be a number of US dollars, got {value.to_eng_string().lower()}")
    if value < 0:
        raise ValueError(f"must not be negative, got {value}")
    return value.copy_abs()  # exact; turns -0.0 into 0.0


def safe_repr(obj: msgspec.Struct, masked: frozenset[str], urls: frozenset[str]) -> str:
    parts = []
    for name in obj.__struct_fields__:
        value = getattr(obj, name)
        if name in masked and value is not None and value != ():
            text = repr(_MASK)
        elif name in urls and isinstance(value, str):
            text = repr(redact_url(value))
        else:
            text = repr(value)
        parts.append(f"{name}={text}")
    return f"{type(obj).__name__}({', '.join(parts)})"


def normal_database_url(url: str, data_dir: Path) -> str:
    if not url:
        return f"sqlite:///{data_dir}/gateway.db"
    if url.startswith("postgres://"):
        url = "postgresql://" + url.removeprefix("postgres://")
    if url.startswith("postgresql://") or (url.startswith("sqlite:///") and url != "sqlite:///"):
        return url
    got = describe(redact_url(url))
    raise FieldProblem("database_url", f"must be sqlite:///<path> or postgresql://..., got {got}")


def decode_custom(kind: type, value: Any) -> object:
    """msgspec's dec_hook: the types it does not know (a path, a CIDR network)."""
    if kind is Path and isinstance(value, str):
        if not value.strip():
            raise ValueError("must not be empty")
        return Path(value)
    if kind is Path:
        raise ValueError(f"must be a string, got {describe(value)}")
    if kind is _NETWORK and isinstance(value, str):
        try:
            return ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            pass
    if kind is _NETWORK:
        raise ValueError(f'must be a CIDR network such as "127.0.0.0/8", got {describe(value)}')
    raise NotImplementedError(kind)
