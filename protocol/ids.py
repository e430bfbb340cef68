"""Identifiers and secret values: prefixed, URL-safe, high-entropy. No I/O."""

from __future__ import annotations

import secrets
import string

_ALPHABET = string.ascii_letters + string.digits


def random_token(length: int) -> str:
    """`length` base62 characters from the OS CSPRNG (about 5.95 bits each)."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def new_id(prefix: str) -> str:
    """An identifier like `key_3kTq...`: 24 base62 characters (~143 bits), never reused."""
    return f"{prefix}_{random_token(24)}"
