"""Writing a streamed response: SSE frames (or audio pieces) as HTTP chunks, paced and counted,
and ended short on purpose: cleanly (break_after_chunks), or by a fault's cut (reset, in-stream
error event, stall). The server owns the connection and carries out what `Outcome` says."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import trio

from bench.upstream.behavior import UpstreamBehavior
from bench.upstream.faults import Cut, ModelCounts
from bench.upstream.http import LAST_CHUNK, chunk
from bench.upstream.replies import SseFrame


class Outcome(enum.Enum):
    COMPLETED = "completed"
    BROKEN = "broken"  # we cut it: break_after_chunks
    RESET = "reset"  # we cut it with a TCP RST: a fault's reset_after_frames
    ERRORED = "errored"  # we ended it with an error event: a fault's error_frame_after
    PEER_LEFT = "peer_left"


CUT_SHORT = frozenset({Outcome.BROKEN, Outcome.RESET, Outcome.ERRORED})


@dataclass(slots=True)
class StreamCut:
    """A fault's end for one stream, after `after` content chunks."""

    after: int
    kind: Cut
    frame: bytes  # the error event, for Cut.ERROR_FRAME
    counts: ModelCounts


def byte_stream_head(content_type: bytes, *, close: bool) -> bytes:
    """Headers of a chunked response of raw bytes (speech audio)."""
    connection = b"close" if close else b"keep-alive"
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: "
        + content_type
        + b"\r\ntransfer-encoding: chunked\r\nconnection: "
        + connection
        + b"\r\n\r\n"
    )


class ChunkWriter:
    """Buffers SSE frames and writes them as one HTTP chunk per flush (one send each)."""

    def __init__(self, stream: trio.SocketStream, head: bytes) -> None:
        self._stream = stream
        self._head = head
        self._frames: list[bytes] = []

    def add(self, frame: bytes) -> None:
        self._frames.append(frame)

    async def flush(self, *, last: bool = False) -> None:
        """Send what is buffered; cancellation may leave a chunk half sent."""
        parts = [self._head] if self._head else []
        self._head = b""
        if self._frames:
            parts.append(chunk(b"".join(self._frames)))
            self._frames.clear()
        if last:
            parts.append(LAST_CHUNK)
        if parts:
            await self._stream.send_all(b"".join(parts))


async def write_frames(
    writer: ChunkWriter,
    frames: Sequence[SseFrame],
    behavior: UpstreamBehavior,
    cut: StreamCut | None = None,
) -> Outcome:
    """Wait latency_s, then write the frames, pacing content chunks. BROKEN once
    break_after_chunks content chunks are out (N=0: before the first), or the `cut`'s outcome
    after its N (the earlier of the two; a stall never returns); PEER_LEFT when a send finds
    the peer gone. Cancellation stops it wherever it is."""
    limit = behavior.break_after_chunks
    if cut is not None and (limit is None or cut.after <= limit):
        limit = cut.after
    else:
        cut = None
    interval = behavior.chunk_interval_s
    gap = behavior.keepalive_gap_s
    sent = 0
    try:
        if behavior.latency_s > 0:
            await trio.sleep(behavior.latency_s)
        for data, counted in frames:
            if counted:
                if limit is not None and sent >= limit:
                    return await _end_early(writer, cut)
                if sent and interval > 0:
                    await writer.flush()
                    await trio.sleep(interval)
                writer.add(data)
                sent += 1
                if sent == limit:
                    return await _end_early(writer, cut)
                if sent == 1 and gap > 0:
                    await writer.flush()
                    await trio.sleep(gap)
            else:
                writer.add(data)
        await writer.flush(last=True)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return Outcome.PEER_LEFT
    return Outcome.COMPLETED


async def _end_early(writer: ChunkWriter, cut: StreamCut | None) -> Outcome:
    """Flush what is buffered and end the stream short: cleanly (break_after_chunks), for a
    reset, or with an error event; a stall sends what it has and waits for the peer to leave."""
    if cut is None:
        await writer.flush()
        return Outcome.BROKEN
    cut.counts.count(cut.kind.value)
    if cut.kind is Cut.ERROR_FRAME:
        writer.add(cut.frame)
        await writer.flush(last=True)
        return Outcome.ERRORED
    await writer.flush()
    if cut.kind is Cut.RESET:
        return Outcome.RESET
    await trio.sleep_forever()  # Cut.STALL; the caller watches for the peer leaving
