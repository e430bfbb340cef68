"""Identifiers and secret values: prefixed, URL-safe, high-entropy. No I/O."""

from __future__ import annotations

import secrets
import string

_ALPHABET = string.ascii_letters + string.digits
_BASE = len(_ALPHABET)
_SORTED = string.digits + string.ascii_uppercase + string.ascii_lowercase  # in ASCII order


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


def ordered_id(prefix: str, now_us: int) -> str:
    """Like `new_id`, but starting with the time (11 base62 digits of microseconds), so ids
    made one after another sort together: cheap to append to a unique index (ledger rows),
    and still unguessable (13 random characters, ~77 bits)."""
    head = []
    for _ in range(11):
        now_us, digit = divmod(now_us, _BASE)
        head.append(_SORTED[digit])
    return f"{prefix}_{''.join(reversed(head))}{random_token(13)}"
