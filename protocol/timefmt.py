"""Timestamps: stored as integer microseconds since the Unix epoch (UTC), rendered as ISO 8601."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_us() -> int:
    return time.time_ns() // 1000


def to_iso(us: int | None) -> str | None:
    if us is None:
        return None
    dt = datetime.fromtimestamp(us / 1_000_000, tz=UTC)
    return dt.isoformat(timespec="seconds").replace("+00:00", "Z")


def from_datetime(dt: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
