"""What a route hands back to the server: a whole JSON response, or SSE frames to pace.

Routes build these without I/O; the server writes them, applying the behavior's latency, chunk
interval, keepalive gap and break point. Treat them as immutable: they are not frozen only because
frozen dataclasses cost four times as much to build, and streams build many per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# One complete SSE event (blank line included) and whether it is a content chunk: content chunks
# are paced by chunk_interval_s and counted by break_after_chunks. A bare tuple: 20+ per stream.
SseFrame = tuple[bytes, bool]


@dataclass(slots=True)
class JsonReply:
    status: int
    body: bytes
    headers: Sequence[tuple[str, str]] = ()


@dataclass(slots=True)
class StreamReply:
    frames: Sequence[SseFrame]


Reply = JsonReply | StreamReply
