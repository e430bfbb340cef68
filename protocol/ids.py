"""Identifiers and secret values: prefixed, URL-safe, high-entropy. No I/O but the OS CSPRNG.

Random bytes become base62 characters by `bytes.translate`: each byte below 248 maps to one of
the 62 characters (4 bytes each, so uniformly) and bytes 248-255 are dropped (rejection
sampling). Secrets read the OS source per call; ids take their characters from a 4 KiB read
shared by the process (a read per id cost ~6 µs, and a billed request makes three ids:
request, completion, ledger row).
"""

from __future__ import annotations

import os
import string
import threading
from functools import lru_cache

_ALPHABET = string.ascii_letters + string.digits
_BASE = len(_ALPHABET)
_SORTED = string.digits + string.ascii_uppercase + string.ascii_lowercase  # in ASCII order

_KEPT = 256 - 256 % _BASE  # 248 = 4 × 62
_TO_BASE62 = bytes.maketrans(bytes(range(_KEPT)), (_ALPHABET * (_KEPT // _BASE)).encode())
_DROPPED = bytes(range(_KEPT, 256))
_POOL_BYTES = 4096


def _base62(random_bytes: bytes) -> str:
    return random_bytes.translate(_TO_BASE62, _DROPPED).decode("ascii")


def random_token(length: int) -> str:
    """`length` base62 characters (about 5.95 bits each) from a fresh read of the OS CSPRNG:
    for secrets."""
    out = ""
    while len(out) < length:  # 3 % of bytes are dropped: read a little more than needed
        out += _base62(os.urandom(length + length // 16 + 4))
    return out[:length]


class _CharPool:
    """Base62 characters from the OS CSPRNG, read 4 KiB at a time (about 3,960 characters),
    each handed out once. Thread-safe; emptied in a forked child so that parent and child
    never hand out the same characters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chars = ""
        self._at = 0

    def take(self, length: int) -> str:
        with self._lock:
            end = self._at + length
            if end > len(self._chars):
                self._chars = _base62(os.urandom(_POOL_BYTES))
                self._at, end = 0, length
            out = self._chars[self._at : end]
            self._at = end
            return out

    def forget(self) -> None:
        self._lock = threading.Lock()
        self._chars = ""
        self._at = 0


_pool = _CharPool()
os.register_at_fork(after_in_child=_pool.forget)


def random_id_chars(length: int) -> str:
    """`length` base62 characters for an identifier (at most about 3,900)."""
    return _pool.take(length)


def new_id(prefix: str) -> str:
    """An identifier like `key_3kTq...`: 24 base62 characters (~143 bits), never reused."""
    return f"{prefix}_{_pool.take(24)}"


def ordered_id(prefix: str, now_us: int) -> str:
    """Like `new_id`, but starting with the time (11 base62 digits of microseconds), so ids
    made one after another sort together: cheap to append to a unique index (ledger rows),
    and still unguessable (13 random characters, ~77 bits)."""
    high, low = divmod(now_us, _BASE**3)  # the high 8 digits change every 0.24 s
    return (
        f"{prefix}_{_high_digits(high)}{_SORTED[low // _BASE**2]}"
        f"{_SORTED[low // _BASE % _BASE]}{_SORTED[low % _BASE]}{_pool.take(13)}"
    )


@lru_cache(maxsize=4)
def _high_digits(high: int) -> str:
    digits = []
    for _ in range(8):
        high, digit = divmod(high, _BASE)
        digits.append(_SORTED[digit])
    return "".join(reversed(digits))
