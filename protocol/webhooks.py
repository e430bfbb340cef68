"""Webhooks on the wire, with no I/O: event types, the envelope bytes, signatures, secrets and
the retry schedule (docs/webhooks.md).

The envelope is built from the stored row, never re-serialized from objects: its bytes are the
same on every attempt and every redelivery, so a receiver's deduplication by `id` and any
signature check over the raw body see one stable document.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import secrets
from collections.abc import Iterable, Sequence
from email.utils import parsedate_to_datetime
from enum import Enum

from protocol.errors import SecretTooShort
from protocol.timefmt import to_iso

EVENT_TYPES: tuple[str, ...] = (
    "completion.success",
    "completion.error",
    "budget.threshold",
    "budget.exhausted",
    "key.created",
    "key.deleted",
    "key.updated",
    "provider_key.invalid",
    "endpoint.unhealthy",
    "endpoint.recovered",
    "fine_tuning.job.succeeded",
    "fine_tuning.job.failed",
    "guardrail.triggered",
    "cache.purged",
)
KNOWN_TYPES = frozenset(EVENT_TYPES)
ALL = "*"

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
MAX_SECRET_CHARS = 1024
# A secret the client chooses has at least this many characters after an optional `whsec_`
# prefix (the prefix is public: it adds nothing an attacker must guess). A generated one has 43.
MIN_SECRET_CHARS = 24
# `secret_hint` shows the last HINT_CHARS characters of a secret only when what follows its
# prefix is at least HINTED_FROM_CHARS long: never more than an eighth of a secret.
HINT_CHARS = 4
HINTED_FROM_CHARS = 32

# The waits before retries 1..6 (the API's schedule). An event gets its first attempt and up to six
# retries; when the sixth retry fails too it is dropped and the subscription disabled.
RETRY_DELAYS_S: tuple[int, ...] = (10, 60, 600, 3600, 6 * 3600, 24 * 3600)
MAX_ATTEMPTS = 1 + len(RETRY_DELAYS_S)
MAX_RETRY_AFTER_S = 7 * 24 * 3600  # a longer Retry-After is honoured only up to a week

HEADER_ID = "Service-Webhook-Id"
HEADER_EVENT = "Service-Webhook-Event"
HEADER_TIMESTAMP = "Service-Webhook-Timestamp"
HEADER_SIGNATURE = "Service-Webhook-Signature"


def normalize_filter(events: Iterable[str]) -> tuple[str, ...]:
    """The subscription's `events` as stored: `("*",)` alone, or known types in the order
    given, without repeats. ValueError names the first unknown type."""
    seen: list[str] = []
    for event in events:
        if event != ALL and event not in KNOWN_TYPES:
            raise ValueError(f"unknown event type {event!r}")
        if event not in seen:
            seen.append(event)
    if not seen:
        raise ValueError('at least one event type (or "*") is required')
    if ALL in seen:
        if len(seen) > 1:
            raise ValueError('"*" already selects every type; list it alone')
        return (ALL,)
    return tuple(seen)


def matches(event_filter: Sequence[str], event_type: str) -> bool:
    return event_filter[:1] == (ALL,) or event_type in event_filter


def generate_secret() -> str:
    """`whsec_` and 32 random bytes, base64url without padding (43 characters)."""
    raw = base64.urlsafe_b64encode(secrets.token_bytes(SECRET_BYTES)).rstrip(b"=")
    return SECRET_PREFIX + raw.decode("ascii")


def check_custom_secret(secret: str) -> None:
    """A secret the client chose is used as given; only its length and characters are
    checked (printable ASCII, so it fits any receiver's configuration). ValueError says why
    (SecretTooShort when it is too short to resist guessing)."""
    if len(secret) > MAX_SECRET_CHARS:
        raise ValueError(f"a secret has at most {MAX_SECRET_CHARS} characters")
    if not all(" " < c <= "~" for c in secret):
        raise ValueError("a secret has printable ASCII characters only, no spaces")
    if len(secret.removeprefix(SECRET_PREFIX)) < MIN_SECRET_CHARS:
        raise SecretTooShort(
            f"a secret has at least {MIN_SECRET_CHARS} characters (not counting a"
            f" `{SECRET_PREFIX}` prefix); omit it to have one generated"
        )


def secret_hint(secret: str) -> str:
    """What the API shows of a stored secret: the prefix, if any, and its last HINT_CHARS
    characters when the rest is at least HINTED_FROM_CHARS long (nothing more otherwise)."""
    prefix = SECRET_PREFIX if secret.startswith(SECRET_PREFIX) else ""
    rest = secret[len(prefix) :]
    return f"{prefix}…{rest[-HINT_CHARS:] if len(rest) >= HINTED_FROM_CHARS else ''}"


def envelope(event_id: str, event_type: str, created_at_us: int, data_json: str) -> bytes:
    """The delivery body. `data_json` is the stored `data` text, embedded verbatim."""
    head = json.dumps(
        {"id": event_id, "type": event_type, "created_at": to_iso(created_at_us)},
        separators=(",", ":"),
    )
    return (head[:-1] + ',"data":' + data_json + "}").encode()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `v1` signature: hex HMAC-SHA256 of `<timestamp>.<raw body>`, keyed by the secret's
    UTF-8 bytes exactly as given (the `whsec_` prefix included)."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_header(timestamp: int, body: bytes, secrets_: Sequence[str]) -> str:
    """`t=<ts>,v1=<hex>`; during a rotation's overlap one `v1` per secret, newest first."""
    return ",".join([f"t={timestamp}", *(f"v1={sign(s, timestamp, body)}" for s in secrets_)])


def delivery_headers(
    event_id: str, event_type: str, timestamp: int, body: bytes, secrets_: Sequence[str]
) -> list[tuple[str, str]]:
    return [
        ("Content-Type", "application/json"),
        (HEADER_ID, event_id),
        (HEADER_EVENT, event_type),
        (HEADER_TIMESTAMP, str(timestamp)),
        (HEADER_SIGNATURE, signature_header(timestamp, body, secrets_)),
    ]


class Outcome(Enum):
    DELIVERED = "delivered"
    RETRY = "retry"  # 5xx, 408, 429, timeout, connection error
    PERMANENT = "permanent"  # any other status: the event fails, no retry


def outcome_of(status: int | None) -> Outcome:
    """The delivery rules (docs/webhooks.md, "Delivery") for a response status (None: no
    response — timeout, connection or TLS error, a refused address). A redirect is not
    followed and counts as permanent."""
    if status is None or status >= 500 or status in (408, 429):
        return Outcome.RETRY
    if 200 <= status < 300:
        return Outcome.DELIVERED
    return Outcome.PERMANENT


def retry_after_s(value: str | None, now_s: float) -> float | None:
    """A `Retry-After` header (seconds or an HTTP date) as seconds from now, capped at
    MAX_RETRY_AFTER_S; None when absent or malformed."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(min(int(value[:12]), MAX_RETRY_AFTER_S))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    seconds = when.timestamp() - now_s
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), float(MAX_RETRY_AFTER_S))


def next_delay_s(failed_attempts: int, retry_after: float | None) -> float | None:
    """Seconds until the next attempt after `failed_attempts` retryable failures of one event,
    or None when it is spent (drop the event, disable the subscription). A longer Retry-After
    wins over the schedule; a shorter one does not bring the retry forward."""
    if failed_attempts >= MAX_ATTEMPTS:
        return None
    delay = float(RETRY_DELAYS_S[failed_attempts - 1])
    return delay if retry_after is None else max(delay, retry_after)
