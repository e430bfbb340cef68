"""API credentials: their forms, generation and keyed hashing. No I/O.

Credentials are never stored: only `hash(secret)` (HMAC-SHA256 keyed by a pepper derived from
the master key at the first start, then kept in the keyring sealed under it: protocol/keyring.py)
and a short display prefix. A database dump alone therefore cannot be used to test guesses
offline without the master key.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from dataclasses import dataclass

from protocol.ids import random_token

MANAGEMENT_PREFIX = "service_mgmt_"
SECRET_PREFIX = "service_sk_"
LIVE_SECRET_PREFIX = "service_sk_live_"
# The instance operator's credential (GATEWAY_OPERATOR_KEY): configured, never generated or
# stored; not an organization's, so `kind_of` does not know it.
OPERATOR_PREFIX = "service_op_"
_SECRET_LENGTH = 48  # base62 characters: ~285 bits
_DISPLAY_CHARS = 4  # characters of the random part kept in the display prefix

_PEPPER_INFO = b"model-gateway/credential-pepper/v1"


class CredentialKind(enum.Enum):
    MANAGEMENT = "management"
    SECRET = "secret"


@dataclass(frozen=True, slots=True)
class NewCredential:
    """A freshly generated credential: `value` is shown once, the rest is stored."""

    value: str
    hash: str
    prefix: str


def derive_pepper(master_key: bytes) -> bytes:
    """The credential-hashing key, derived from the master key (HKDF-expand, one block)."""
    return hmac.new(master_key, _PEPPER_INFO + b"\x01", hashlib.sha256).digest()


class CredentialHasher:
    """Keyed hashing of credential values."""

    def __init__(self, pepper: bytes) -> None:
        self._pepper = pepper

    def __repr__(self) -> str:
        return "CredentialHasher(pepper=***)"

    def hash(self, value: str) -> str:
        return hmac.new(self._pepper, value.encode(), hashlib.sha256).hexdigest()

    def generate(self, kind: CredentialKind) -> NewCredential:
        prefix = MANAGEMENT_PREFIX if kind is CredentialKind.MANAGEMENT else LIVE_SECRET_PREFIX
        body = random_token(_SECRET_LENGTH)
        value = prefix + body
        return NewCredential(value=value, hash=self.hash(value), prefix=display_prefix(value))


def display_prefix(value: str) -> str:
    """The masked leading part shown in lists: the kind prefix and a few random characters."""
    for prefix in (MANAGEMENT_PREFIX, LIVE_SECRET_PREFIX, SECRET_PREFIX):
        if value.startswith(prefix):
            return value[: len(prefix) + _DISPLAY_CHARS]
    return value[:_DISPLAY_CHARS]


def kind_of(value: str) -> CredentialKind | None:
    """Which kind a presented credential claims to be, from its prefix; None if neither."""
    if value.startswith(MANAGEMENT_PREFIX):
        return CredentialKind.MANAGEMENT
    if value.startswith(SECRET_PREFIX):
        return CredentialKind.SECRET
    return None
