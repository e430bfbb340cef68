"""What a route hands back to the server: a whole response, or SSE frames (or audio) to pace.

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
    """A whole body: JSON unless `content_type` says otherwise (e.g. a plain-text transcript)."""

    status: int
    body: bytes
    headers: Sequence[tuple[str, str]] = ()
    content_type: bytes = b"application/json"


@dataclass(slots=True)
class StreamReply:
    """SSE frames, or with `content_type` raw bytes (speech audio): each "frame" is then a
    piece of the body, paced and counted like an SSE content chunk."""

    frames: Sequence[SseFrame]
    content_type: bytes | None = None


Reply = JsonReply | StreamReply
