"""The simulated upstream server: accept connections, parse HTTP/1.1, answer, pace streams.

One task per connection answers its requests in order (keep-alive and pipelining). While a response
waits (latency, hang, paced stream) a second task reads the socket, so a client leaving is noticed
at once: the response is cancelled, the connection closed, and a stream is counted in
`streams_client_closed`. Cancelling `serve_upstream` closes the listener and every connection at
once, mid-response included. A route that raises answers its request 500 (logged), a failure
outside a route closes its connection: neither ends the server or anyone else's requests.
Per-model faults (bench/upstream/faults.py) are planned when a request starts and carried out
here: stalls, TCP resets, in-stream error events.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Awaitable, Callable

import trio

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior, snapshot
from bench.upstream.dispatch import protocol_error, route, stream_error_frame
from bench.upstream.faults import Cut, FaultBook, FaultPlan
from bench.upstream.fine_tuning import FineTuning
from bench.upstream.http import (
    CONTINUE,
    HttpError,
    Request,
    RequestReader,
    json_response,
    stream_head,
)
from bench.upstream.replies import JsonReply, Reply, StreamReply
from bench.upstream.streams import (
    CUT_SHORT,
    ChunkWriter,
    Outcome,
    StreamCut,
    byte_stream_head,
    write_frames,
)

log = logging.getLogger(__name__)
_LINGER_ZERO = struct.pack("ii", 1, 0)

REQUEST_LOG_LIMIT = 10_000
RECEIVE_SIZE = 65536


class UpstreamServer:
    """Live handle on a running simulated upstream; `behavior` may be replaced or mutated."""

    def __init__(self, url: str, behavior: UpstreamBehavior) -> None:
        self.url = url
        self.behavior = behavior
        # Outlives requests and behaviors (bench/upstream/fine_tuning.py); tests inspect it.
        self.fine_tuning = FineTuning()
        self.requests: list[RecordedRequest] = []
        self._faults = FaultBook()
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
        """Counters; `streams_broken` counts streams we cut short on purpose: break_after_chunks,
        and a fault's reset or in-stream error event."""
        return {
            "connections_open": self._connections_open,
            "requests_total": self._requests_total,
            "streams_active": self._streams_active,
            "streams_completed": self._streams_completed,
            "streams_client_closed": self._streams_client_closed,
            "streams_broken": self._streams_broken,
        }

    def fault_statistics(self) -> dict[str, dict[str, int]]:
        """Per model named in a request body while any fault was configured: `requests`, and
        how many times each fault kind was done (bench/upstream/faults.py `KINDS`)."""
        return self._faults.statistics()

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

    def _stream_ended(self, outcome: Outcome | None) -> None:
        """`outcome` is None when the server itself cancelled the stream (shutdown)."""
        self._streams_active -= 1
        if outcome is Outcome.COMPLETED:
            self._streams_completed += 1
        elif outcome is Outcome.PEER_LEFT:
            self._streams_client_closed += 1
        elif outcome in CUT_SHORT:
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
        plan: FaultPlan | None = None
        if behavior.faults:
            plan = server._faults.plan(request.body, behavior.faults, behavior.fault_seed)
            if plan is not None:
                behavior.hang = behavior.hang or plan.stall
                if plan.status is not None:
                    behavior.fail_status, behavior.retry_after = plan.status, plan.retry_after
                behavior.latency_s += plan.delay_s
        if behavior.hang:
            if plan is not None and plan.stall:
                plan.counts.count("stall")
            await self._while_watching(trio.sleep_forever)
            return False
        try:
            reply: Reply = route(recorded, behavior, self._server.fine_tuning)
        except Exception as exc:  # a route's bug: this request's 500, the connection lives on
            log.exception("simulated upstream: %s %s failed", request.method, request.target)
            reply = protocol_error(500, f"simulated upstream error: {type(exc).__name__}")
        close = not request.keep_alive
        if plan is not None:
            return await self._answer_with_faults(recorded, reply, behavior, plan, close)
        if isinstance(reply, StreamReply):
            return await self._answer_stream(reply, behavior, close)
        return await self._answer_json(reply, behavior.latency_s, close)

    async def _answer_with_faults(
        self,
        request: RecordedRequest,
        reply: Reply,
        behavior: UpstreamBehavior,
        plan: FaultPlan,
        close: bool,
    ) -> bool:
        """Answer a request a fault plan hit (its status and delay are in `behavior` already)."""
        counts = plan.counts
        if plan.delay_s > 0:
            counts.count("slow_first_byte")
        if isinstance(reply, StreamReply):
            cut = None
            if plan.cut is not None:
                frame = b""
                if plan.cut is Cut.ERROR_FRAME:
                    frame = stream_error_frame(request, plan.error_status) or b""
                if frame or plan.cut is not Cut.ERROR_FRAME:
                    cut = StreamCut(plan.cut_after, plan.cut, frame, counts)
            return await self._answer_stream(reply, behavior, close, cut)
        if plan.status is not None and reply.status == plan.status:
            counts.count("rate_limit" if plan.status == 429 else "error")
        if plan.cut is None or plan.cut is Cut.ERROR_FRAME or reply.status >= 400:
            return await self._answer_json(reply, behavior.latency_s, close)
        data = b""  # Cut.RESET: nothing at all
        if plan.cut is Cut.STALL:
            whole = json_response(
                reply.status,
                reply.body,
                headers=reply.headers,
                close=close,
                content_type=reply.content_type,
            )
            data = whole[: whole.index(b"\r\n\r\n") + 4]

        async def cut_short() -> None:
            if behavior.latency_s > 0:
                await trio.sleep(behavior.latency_s)
            counts.count("reset" if plan.cut is Cut.RESET else "stall_after_frames")
            if data:
                await self._stream.send_all(data)
                await trio.sleep_forever()

        if not await self._while_watching(cut_short):
            self._reset()
        return False

    def _reset(self) -> None:
        """Make the coming close of this connection a TCP RST (SO_LINGER 0)."""
        try:
            self._stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
        except OSError:
            pass  # already gone

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
        self,
        reply: StreamReply,
        behavior: UpstreamBehavior,
        close: bool,
        cut: StreamCut | None = None,
    ) -> bool:
        """Write one SSE (or raw byte) response and count its outcome; True if the connection
        may serve another request. Cancellation (shutdown) cuts it and leaves it out of
        completed / client_closed / broken."""
        outcome: Outcome | None = None
        if reply.content_type is None:
            head = stream_head(close=close)
        else:
            head = byte_stream_head(reply.content_type, close=close)
        writer = ChunkWriter(self._stream, head)

        async def write() -> None:
            nonlocal outcome
            outcome = await write_frames(writer, reply.frames, behavior, cut)

        self._server._stream_started()
        try:
            if (
                behavior.latency_s > 0
                or behavior.chunk_interval_s > 0
                or behavior.keepalive_gap_s > 0
                or cut is not None
            ):
                if await self._while_watching(write) and outcome is None:
                    outcome = Outcome.PEER_LEFT
            else:
                await write()
        finally:
            self._server._stream_ended(outcome)
        if outcome is Outcome.RESET:
            self._reset()
        return outcome is Outcome.COMPLETED or outcome is Outcome.ERRORED

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
