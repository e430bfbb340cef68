"""The simulated upstream server: accept connections, parse HTTP/1.1, answer, pace streams.

One task per connection answers its requests in order (keep-alive and pipelining). While a response
waits (latency, hang, paced stream) a second task reads the socket, so a client leaving is noticed
at once: the response is cancelled, the connection closed, and a stream is counted in
`streams_client_closed`. Cancelling `serve_upstream` closes the listener and every connection at
once, mid-response included. A route that raises answers its request 500 (logged), a failure
outside a route closes its connection: neither ends the server or anyone else's requests.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Sequence

import trio

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior, snapshot
from bench.upstream.dispatch import protocol_error, route
from bench.upstream.fine_tuning import FineTuning
from bench.upstream.http import (
    CONTINUE,
    LAST_CHUNK,
    HttpError,
    Request,
    RequestReader,
    chunk,
    json_response,
    stream_head,
)
from bench.upstream.replies import JsonReply, Reply, SseFrame, StreamReply

log = logging.getLogger(__name__)

REQUEST_LOG_LIMIT = 10_000
RECEIVE_SIZE = 65536


class _Outcome(enum.Enum):
    COMPLETED = "completed"
    BROKEN = "broken"  # we cut it: break_after_chunks
    PEER_LEFT = "peer_left"


class UpstreamServer:
    """Live handle on a running simulated upstream; `behavior` may be replaced or mutated."""

    def __init__(self, url: str, behavior: UpstreamBehavior) -> None:
        self.url = url
        self.behavior = behavior
        # Outlives requests and behaviors (bench/upstream/fine_tuning.py); tests inspect it.
        self.fine_tuning = FineTuning()
        self.requests: list[RecordedRequest] = []
        self._connections_open = 0
        self._requests_total = 0
        self._streams_active = 0
        self._streams_completed = 0
        self._streams_client_closed = 0
        self._streams_broken = 0
        self._idle = trio.Event()
        self._idle.set()

    def __repr__(self) -> str:
        return f"<UpstreamServer {self.url} {self.statistics()}>"

    def statistics(self) -> dict[str, int]:
        """Counters; `streams_broken` counts streams cut by break_after_chunks."""
        return {
            "connections_open": self._connections_open,
            "requests_total": self._requests_total,
            "streams_active": self._streams_active,
            "streams_completed": self._streams_completed,
            "streams_client_closed": self._streams_client_closed,
            "streams_broken": self._streams_broken,
        }

    async def wait_streams_idle(self) -> None:
        """Return once no stream is in progress. Cancellation only abandons the wait."""
        await trio.lowlevel.checkpoint()
        while self._streams_active:
            await self._idle.wait()

    def _record(self, request: RecordedRequest) -> None:
        self._requests_total += 1
        log = self.requests
        if len(log) >= REQUEST_LOG_LIMIT:
            del log[: len(log) - REQUEST_LOG_LIMIT + 1]
        log.append(request)

    def _stream_started(self) -> None:
        if not self._streams_active:
            self._idle = trio.Event()
        self._streams_active += 1

    def _stream_ended(self, outcome: _Outcome | None) -> None:
        """`outcome` is None when the server itself cancelled the stream (shutdown)."""
        self._streams_active -= 1
        if outcome is _Outcome.COMPLETED:
            self._streams_completed += 1
        elif outcome is _Outcome.PEER_LEFT:
            self._streams_client_closed += 1
        elif outcome is _Outcome.BROKEN:
            self._streams_broken += 1
        if not self._streams_active:
            self._idle.set()

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        self._connections_open += 1
        try:
            await _Connection(self, stream).serve()
        except Exception:
            # A bug met while serving one connection ends that connection (it is closed by
            # now), never the server and everyone else's requests with it.
            log.exception("simulated upstream: a connection failed")
        finally:
            self._connections_open -= 1


class _Connection:
    def __init__(self, server: UpstreamServer, stream: trio.SocketStream) -> None:
        self._server = server
        self._stream = stream
        self._parser = RequestReader()

    async def serve(self) -> None:
        """Answer requests until the peer closes, asks to close, errs or breaks the connection.
        Cancellation closes the connection at once."""
        try:
            await self._serve_requests()
        except HttpError as exc:
            reply = protocol_error(exc.status, exc.message)
            try:
                await self._stream.send_all(json_response(reply.status, reply.body, close=True))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the peer went away: nobody to answer
        finally:
            await trio.aclose_forcefully(self._stream)

    async def _serve_requests(self) -> None:
        parser = self._parser
        while True:
            request = parser.next_request()
            while request is None:
                if parser.take_continue():
                    await self._stream.send_all(CONTINUE)
                data = await self._stream.receive_some(RECEIVE_SIZE)
                if not data:
                    return
                parser.feed(data)
                request = parser.next_request()
            if not await self._answer(request) or not request.keep_alive:
                return

    async def _answer(self, request: Request) -> bool:
        """Record and answer one request; False when the connection must close after it."""
        server = self._server
        recorded = RecordedRequest(request.method, request.target, request.headers, request.body)
        server._record(recorded)
        behavior = snapshot(server.behavior)
        if behavior.hang:
            await self._while_watching(trio.sleep_forever)
            return False
        try:
            reply: Reply = route(recorded, behavior, self._server.fine_tuning)
        except Exception as exc:  # a route's bug: this request's 500, the connection lives on
            log.exception("simulated upstream: %s %s failed", request.method, request.target)
            reply = protocol_error(500, f"simulated upstream error: {type(exc).__name__}")
        close = not request.keep_alive
        if isinstance(reply, StreamReply):
            return await self._answer_stream(reply, behavior, close)
        return await self._answer_json(reply, behavior.latency_s, close)

    async def _answer_json(self, reply: JsonReply, latency_s: float, close: bool) -> bool:
        """Write one JSON response after `latency_s`; False if the peer left while we waited."""
        data = json_response(
            reply.status,
            reply.body,
            headers=reply.headers,
            close=close,
            content_type=reply.content_type,
        )
        if latency_s <= 0:
            await self._stream.send_all(data)
            return True

        async def delayed() -> None:
            await trio.sleep(latency_s)
            await self._stream.send_all(data)

        return not await self._while_watching(delayed)

    async def _answer_stream(
        self, reply: StreamReply, behavior: UpstreamBehavior, close: bool
    ) -> bool:
        """Write one SSE (or raw byte) response and count its outcome; True if it completed.
        Cancellation (shutdown) cuts it and leaves it out of completed / client_closed / broken."""
        outcome: _Outcome | None = None
        if reply.content_type is None:
            head = stream_head(close=close)
        else:
            head = byte_stream_head(reply.content_type, close=close)
        writer = _ChunkWriter(self._stream, head)

        async def write() -> None:
            nonlocal outcome
            outcome = await _write_frames(writer, reply.frames, behavior)

        self._server._stream_started()
        try:
            if (
                behavior.latency_s > 0
                or behavior.chunk_interval_s > 0
                or behavior.keepalive_gap_s > 0
            ):
                if await self._while_watching(write) and outcome is None:
                    outcome = _Outcome.PEER_LEFT
            else:
                await write()
        finally:
            self._server._stream_ended(outcome)
        return outcome is _Outcome.COMPLETED

    async def _while_watching(self, work: Callable[[], Awaitable[None]]) -> bool:
        """Run `work` while reading the socket; cancel `work` if the peer closes or breaks it.
        True when the peer left. Bytes the peer sends meanwhile (pipelining) go to the parser."""
        left = False

        async def watch(scope: trio.CancelScope) -> None:
            nonlocal left
            try:
                while data := await self._stream.receive_some(RECEIVE_SIZE):
                    self._parser.feed(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            left = True
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, nursery.cancel_scope)
            try:
                await work()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                left = True
            nursery.cancel_scope.cancel()
        return left


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


class _ChunkWriter:
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


async def _write_frames(
    writer: _ChunkWriter, frames: Sequence[SseFrame], behavior: UpstreamBehavior
) -> _Outcome:
    """Wait latency_s, then write the frames, pacing content chunks. BROKEN once
    break_after_chunks content chunks are out (N=0: before the first); PEER_LEFT when a send finds
    the peer gone. Cancellation stops it wherever it is."""
    limit = behavior.break_after_chunks
    interval = behavior.chunk_interval_s
    gap = behavior.keepalive_gap_s
    sent = 0
    try:
        if behavior.latency_s > 0:
            await trio.sleep(behavior.latency_s)
        for data, counted in frames:
            if counted:
                if limit is not None and sent >= limit:
                    await writer.flush()
                    return _Outcome.BROKEN
                if sent and interval > 0:
                    await writer.flush()
                    await trio.sleep(interval)
                writer.add(data)
                sent += 1
                if sent == limit:
                    await writer.flush()
                    return _Outcome.BROKEN
                if sent == 1 and gap > 0:
                    await writer.flush()
                    await trio.sleep(gap)
            else:
                writer.add(data)
        await writer.flush(last=True)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return _Outcome.PEER_LEFT
    return _Outcome.COMPLETED


async def serve_upstream(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    behavior: UpstreamBehavior | None = None,
    task_status: trio.TaskStatus[UpstreamServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; `task_status.started` hands over the UpstreamServer once listening.
    Cancellation closes the listener and every connection at once (streams are cut mid-way)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound_host, bound_port = listeners[0].socket.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    server = UpstreamServer(f"http://{shown}:{bound_port}", behavior or UpstreamBehavior())
    task_status.started(server)
    await trio.serve_listeners(server._serve_connection, listeners)
