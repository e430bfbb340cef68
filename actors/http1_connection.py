"""One HTTP/1.1 client connection on Trio streams: connect (TCP, TLS through trio.SSLStream),
send a request, read the response head and body framed by llhttp (protocol/http1_client.py),
and say whether the connection may carry another request. The upstream pool
(actors/http1_pool.py) and the webhook sender (actors/webhooks/sender.py) both use it.

Errors (drawn in actors/errors.py): `ConnectFailed` (an `UpstreamUnavailable`), `ConnectionBroken`
(an `UpstreamUnavailable`: closed or reset mid-response), `ReadTimedOut` (an `UpstreamTimeout`),
all without a provider (the upstream client names it); `UpstreamMalformed` from the parser as it
is; and `Stale`, a connection that closed or reset before any response byte (a pool retries a
kept-alive request elsewhere).

Liveness of an idle connection (`quiet`) uses public APIs only: one `poll` of the socket, the
TLS layer's decrypted-but-unread bytes (`SSLStream.pending()`), and under TLS a transport
wrapper (`_Records`) that hands the TLS layer one TLS record at a time, so that a record that
arrived in the same TCP segment as the response's last one waits in our buffer, where it is
seen, not in the TLS layer's.
"""

from __future__ import annotations

import math
import select
import ssl
from collections.abc import AsyncIterable

import outcome
import trio

from actors.errors import ConnectFailed, ConnectionBroken, ReadTimedOut, Stale
from protocol.errors import UpstreamError, UpstreamMalformed
from protocol.http1_client import ResponseHead, ResponseParser, format_chunk

_RECEIVE = 65536
_FAILED = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class _Records(trio.abc.Stream):
    """The TCP stream under TLS, handing the TLS layer at most one whole TLS record per
    `receive_some`: what arrived past it stays in `held`, visible to `quiet`."""

    __slots__ = ("_header", "_left", "held", "tcp")

    def __init__(self, tcp: trio.SocketStream) -> None:
        self.tcp = tcp
        self.held = b""
        self._header = b""  # a record header split across reads
        self._left = 0  # bytes left of the current record's body

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.tcp.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.tcp.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = self.held
        if not data:
            received = await self.tcp.receive_some(max_bytes)
            if not received:
                return b""
            data = bytes(received)
        end = self._record_end(data)
        self.held = data[end:]
        return data[:end] if self.held else data

    def _record_end(self, data: bytes) -> int:
        """Where the first record that ends in `data` ends (len(data) if none does)."""
        pos, size = 0, len(data)
        while pos < size:
            if self._left:
                take = min(self._left, size - pos)
                self._left -= take
                pos += take
                if not self._left:
                    return pos
            else:
                piece = data[pos : pos + 5 - len(self._header)]
                self._header += piece
                pos += len(piece)
                if len(self._header) == 5:
                    self._left = int.from_bytes(self._header[3:5], "big")
                    self._header = b""
                    if not self._left:
                        return pos
        return pos

    async def aclose(self) -> None:
        await self.tcp.aclose()


class Connection:
    """One connection, one request at a time. `idle_since` is set by a pool."""

    __slots__ = ("_poll", "_records", "_tls", "idle_since", "stream", "tcp")

    def __init__(
        self,
        tcp: trio.SocketStream,
        tls: trio.SSLStream[_Records] | None = None,
        records: _Records | None = None,
    ) -> None:
        self.tcp = tcp
        self.stream: trio.abc.Stream = tls if tls is not None else tcp
        self._tls = tls
        self._records = records
        self.idle_since = 0.0
        # poll, not select: descriptors past FD_SETSIZE (1024) are common under load.
        self._poll = select.poll()
        self._poll.register(tcp.socket.fileno(), select.POLLIN)

    def quiet(self) -> bool:
        """Whether nothing arrived while idle: no byte, no EOF, no reset (one poll syscall)."""
        if self._poll.poll(0):
            return False
        tls = self._tls
        if tls is None:
            return True
        records = self._records
        return not (tls.pending() or (records is not None and records.held))

    def close(self) -> None:
        """Close an idle connection now (no task is using it)."""
        self.tcp.socket.close()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self.stream)

    async def send(self, data: bytes) -> None:
        """Send `data`; Stale when the peer closed or reset the connection."""
        try:
            await self.stream.send_all(data)
        except _FAILED:
            raise Stale(eof=False) from None

    async def read_head(self, *, within_s: float, read_timeout_s: float) -> Response:
        """Read until the response head is complete, within `within_s` for the whole head;
        the body is then read with `read_timeout_s` per read. Stale if the connection was
        closed before any byte."""
        stream = self.stream
        parser = ResponseParser()
        received = False
        with trio.move_on_after(within_s):  # not fail_after: see Response._receive
            while True:
                try:
                    chunk = await stream.receive_some(_RECEIVE)
                except _FAILED:
                    if not received:
                        raise Stale(eof=False) from None
                    raise ConnectionBroken("connection reset mid-head") from None
                if not chunk:
                    if not received:
                        raise Stale(eof=True)
                    raise ConnectionBroken("connection closed mid-head", eof=True)
                received = True
                body = parser.feed(chunk if isinstance(chunk, bytes) else bytes(chunk))
                if parser.head is not None:
                    return Response(parser, self, body, read_timeout_s)
        raise ReadTimedOut(f"no complete response head in {within_s} s")

    async def send_streamed(
        self, head: bytes, chunks: AsyncIterable[bytes], read_timeout_s: float
    ) -> Response:
        """Send a request head and its chunked body while watching for the answer: an upstream
        may answer before the body ended (413, 401) and stop reading; the rest is then not
        sent. The read timeout runs from the body's end (an upload may take longer than it); a
        send that makes no progress for that long is a timeout too (an upstream that stopped
        reading). An exception from `chunks` (the client left) passes through."""
        answer: list[Response] = []
        failed: list[UpstreamError] = []

        async def read_head(scope: trio.CancelScope) -> None:
            try:
                answer.append(
                    await self.read_head(within_s=math.inf, read_timeout_s=read_timeout_s)
                )
            except Stale:
                failed.append(ConnectionBroken("connection closed before the response"))
            except UpstreamError as exc:
                failed.append(exc)
            scope.cancel()  # the answer (or its failure) is in: stop sending, if still

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_head, nursery.cancel_scope)
            # Captured, not raised here: a nursery would wrap it in an exception group.
            sent = await outcome.acapture(_send_body, self.stream, head, chunks, read_timeout_s)
            if isinstance(sent, outcome.Value):
                nursery.cancel_scope.deadline = trio.current_time() + read_timeout_s
            else:
                nursery.cancel_scope.cancel()
        if failed:
            raise failed[0]
        if isinstance(sent, outcome.Error) and not isinstance(sent.error, trio.Cancelled):
            sent.unwrap()  # the body's source failed (the client left), or a send timed out
        # (A Cancelled is dropped: ours, or one from outside that the next checkpoint repeats.)
        if not answer:
            raise ReadTimedOut(f"no complete response head in {read_timeout_s} s")
        response = answer[0]
        if not (isinstance(sent, outcome.Value) and sent.value):
            response.keep = False  # the request was cut short: the connection is spent
        return response


async def _send_body(
    stream: trio.abc.Stream, head: bytes, chunks: AsyncIterable[bytes], stall_s: float
) -> bool:
    """Send the head and the chunked body; False when the peer closed or reset the connection
    first, ReadTimedOut when one piece could not be sent for `stall_s`. An exception from
    `chunks` passes through."""
    if not await _sent(stream, head, stall_s):
        return False
    async for chunk in chunks:
        if chunk and not await _sent(stream, format_chunk(chunk), stall_s):
            return False
    return await _sent(stream, format_chunk(b""), stall_s)


async def _sent(stream: trio.abc.Stream, data: bytes, stall_s: float) -> bool:
    try:
        with trio.move_on_after(stall_s) as waited:
            await stream.send_all(data)
    except _FAILED:
        return False
    if waited.cancelled_caught:
        raise ReadTimedOut(f"the upstream read none of the body for {stall_s} s")
    return True


async def connect(
    host: str, port: int, *, ssl_context: ssl.SSLContext | None, timeout_s: float
) -> Connection:
    """A connection to `host`:`port` (TLS when `ssl_context` is given), within `timeout_s`
    for TCP and TLS together; ConnectFailed otherwise."""
    try:
        with trio.fail_after(timeout_s):
            tcp = await trio.open_tcp_stream(host, port)
            if ssl_context is None:
                return Connection(tcp)
            return await secure(tcp, ssl_context, host)
    except trio.TooSlowError:
        raise ConnectFailed(f"connect timed out after {timeout_s} s") from None
    except (OSError, trio.BrokenResourceError) as exc:
        raise ConnectFailed(f"{type(exc).__name__}: {exc}") from None


async def secure(
    tcp: trio.SocketStream,
    ssl_context: ssl.SSLContext,
    server_hostname: str,
    *,
    https_compatible: bool = False,
) -> Connection:
    """TLS over `tcp`. A failed handshake raises trio.BrokenResourceError (its __cause__ is
    the ssl error); `tcp` is closed on any failure, cancellation included."""
    records = _Records(tcp)
    tls = trio.SSLStream(
        records, ssl_context, server_hostname=server_hostname, https_compatible=https_compatible
    )
    try:
        await tls.do_handshake()
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(tcp)
        raise
    return Connection(tcp, tls, records)


class Response:
    """A response whose head has arrived; the body is read with `next_chunk` or `read`."""

    def __init__(self, parser: ResponseParser, conn: Connection, first: bytes, timeout: float):
        head = parser.head
        assert head is not None
        self.status = head.status
        self._head = head
        self._parser = parser
        self._conn = conn
        self._pending = first
        self._read_timeout = timeout
        self._silent_since: float | None = None  # next_chunk_or_silence found nothing since
        self._waiting: trio.CancelScope | None = None  # next_chunk_or_silence's wait
        self.keep = True  # False: never reused, whatever the response said

    @property
    def head(self) -> ResponseHead:
        return self._head

    @property
    def headers(self) -> dict[str, str]:
        """Decoded on first use (most calls never need them)."""
        return self._head.headers

    @property
    def complete(self) -> bool:
        return self._parser.done and not self._pending

    @property
    def reusable(self) -> bool:
        """Read to its end, keep-alive, nothing after it: the connection may be reused."""
        return self.keep and self._parser.reusable

    async def next_chunk(self) -> bytes:
        """The next body bytes as they arrive (chunked framing removed); b"" at the end.
        Cancellation leaves the connection unusable; the pool then closes it. (A method, not
        an async generator, so that abandoning a body leaves nothing to finalize.)"""
        # Silence as long as the read timeout is a ReadTimedOut, never None.
        return await self.next_chunk_or_silence(self._read_timeout) or b""

    async def next_chunk_or_silence(self, idle_s: float) -> bytes | None:
        """As `next_chunk`, or None when nothing arrived for `idle_s` (the caller may send a
        keep-alive and call again). The read timeout still counts from the last bytes: a
        silence that lasts past it raises ReadTimedOut. Nothing is lost by returning None: a
        receive that is cancelled before it returns has consumed nothing."""
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        parser = self._parser
        while not parser.done:
            now = trio.current_time()
            if self._silent_since is None:
                self._silent_since = now
            read_deadline = self._silent_since + self._read_timeout
            try:
                with trio.CancelScope(deadline=min(read_deadline, now + idle_s)) as waited:
                    self._waiting = waited
                    received = await self._conn.stream.receive_some(_RECEIVE)
            except _FAILED as exc:
                raise ConnectionBroken(type(exc).__name__) from None
            finally:
                self._waiting = None
            if waited.cancelled_caught:
                if trio.current_time() >= read_deadline:
                    raise ReadTimedOut(f"no data for {self._read_timeout} s")
                return None
            self._silent_since = None
            if not received:
                try:
                    parser.feed_eof()
                except UpstreamMalformed as exc:
                    raise ConnectionBroken(str(exc), eof=True) from None
                return b""
            body = parser.feed(received if isinstance(received, bytes) else bytes(received))
            if body:
                return body
        return b""

    def interrupt(self) -> None:
        """End a `next_chunk_or_silence` that is waiting: it returns None at once."""
        if self._waiting is not None:
            self._waiting.cancel()

    async def read(self, max_bytes: int) -> bytes:
        """The rest of the body; UpstreamMalformed once it passes `max_bytes` (a Content-Length
        over it fails before reading)."""
        length = self._head.content_length
        if length is not None and length > max_bytes:
            raise UpstreamMalformed(f"body of {length} bytes, over the {max_bytes} allowed")
        parts: list[bytes] = []
        size = 0
        while chunk := await self.next_chunk():
            size += len(chunk)
            if size > max_bytes:
                raise UpstreamMalformed(f"body over the {max_bytes} bytes allowed")
            parts.append(chunk)
        return b"".join(parts)

    async def read_prefix(self, limit: int) -> bytes:
        """The body's first bytes, about `limit` at most (an error body); the rest stays
        unread, so the connection is closed when released."""
        parts: list[bytes] = []
        size = 0
        while size < limit and (chunk := await self.next_chunk()):
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)
