"""Identifiers and secret values: prefixed, URL-safe, high-entropy. No I/O."""

from __future__ import annotations

import secrets
import string

_ALPHABET = string.ascii_letters + string.digits
_BASE = len(_ALPHABET)


def random_token(length: int) -> str:
    """`length` base62 characters from the OS CSPRNG (about 5.95 bits each).

    One read of the OS source per call: an integer drawn uniformly below 62**length, written
    in base 62 (`secrets.choice` per character costs a read each, ~30 µs for an id)."""
    n = secrets.randbelow(_BASE**length)
    out = []
    for _ in range(length):
        n, digit = divmod(n, _BASE)
        out.append(_ALPHABET[digit])
    return "".join(out)


def new_id(prefix: str) -> str:
    """An identifier like `key_3kTq...`: 24 base62 characters (~143 bits), never reused."""
    return f"{prefix}_{random_token(24)}"
