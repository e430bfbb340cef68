"""Parsing and checking single configuration values: each `parse_*` takes what TOML (or an
environment variable) gave and returns the typed value, or raises `InvalidValue` with the
problem in words; the loader (loader.py) adds the file and key."""

from __future__ import annotations

import base64
import ipaddress
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

from gateway.config.schema import LOG_LEVELS, redact_url
from protocol.credentials import OPERATOR_PREFIX
from protocol.provider_keys import sendable_as_header

_BEARER_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
BOOTSTRAP_PREFIX = "service_mgmt_"
OPERATOR_KEY_MIN_LENGTH = 32


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
