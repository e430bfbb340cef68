"""A minimal HTTP/1.1 client for the load driver: one keep-alive connection, pre-built requests.

It exists because the driver shares a core with the simulated upstream, so every microsecond it
spends per request is taken from the system under test. Responses are framed by the gateway's
own llhttp wrapper (protocol/http1_client.py: Content-Length, chunked or read-until-close
bodies, interim responses skipped); for Server-Sent Events it watches the decoded body for the
first `data:` frame and for `data: [DONE]`. It keeps no body bytes. It must not grow into a
general HTTP client: no redirects, no pipelining, no decompression.

Errors, each with a stable `kind` used as a counter key by the driver::

    HTTPClientError
     ├── ConnectError        the TCP (or TLS) connection could not be opened        "connect"
     ├── ProtocolError       the peer broke HTTP/1.1 or the connection mid-response "protocol"
     │    └── StaleConnection  a reused keep-alive connection closed before a byte arrived
     ├── StreamCut           an SSE body ended (or broke) without `data: [DONE]`     "stream_cut"
     └── StreamError         an SSE body carried an error frame (`data: {"error"`)  "stream_error"

Lower-level `OSError` / `trio.BrokenResourceError` never leave this module.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from time import perf_counter
from typing import Protocol
from urllib.parse import urlsplit

import trio

from protocol import http1_client as http1
from protocol.errors import UpstreamMalformed

_RECEIVE = 64 * 1024


class HTTPClientError(Exception):
    kind = "protocol"


class ConnectError(HTTPClientError):
    kind = "connect"


class ProtocolError(HTTPClientError):
    kind = "protocol"


class StaleConnection(ProtocolError):
    """The server closed an idle keep-alive connection; the request may be retried once."""


class StreamCut(HTTPClientError):
    kind = "stream_cut"


class StreamError(HTTPClientError):
    """The stream ended with the gateway's error frame (it broke after its first byte)."""

    kind = "stream_error"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go, parsed once from an OpenAI-compatible base URL."""

    host: str
    port: int
    tls: bool
    base_path: str

    @classmethod
    def from_base_url(cls, base_url: str) -> Endpoint:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) base URL: {base_url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        return cls(parts.hostname, port, tls, parts.path.rstrip("/"))

    @property
    def authority(self) -> str:
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def build_post(endpoint: Endpoint, path: str, api_key: str, body: bytes, *, sse: bool) -> bytes:
    """The complete request bytes, built once and sent unchanged for every request."""
    accept = "text/event-stream" if sse else "application/json"
    head = (
        f"POST {endpoint.base_path}{path} HTTP/1.1\r\n"
        f"Host: {endpoint.authority}\r\n"
        f"Authorization: Bearer {api_key}\r\n"
        "Content-Type: application/json\r\n"
        f"Accept: {accept}\r\n"
        "User-Agent: gateway-bench/0.1\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    )
    return head.encode("latin-1") + body


@dataclass(frozen=True, slots=True)
class Response:
    """One finished exchange; times are `time.perf_counter()` seconds."""

    status: int
    started: float
    first_byte: float  # first body byte; for SSE the first `data:` frame
    finished: float
    body_bytes: int


class ResponseParser:
    """One response, fed as it arrives: framed by llhttp through protocol/http1_client.py (the
    gateway's own upstream parser, with its limits), timed and SSE-watched here. No I/O."""

    __slots__ = (
        "_inner",
        "_sse",
        "_tail",
        "body_bytes",
        "done",
        "errored",
        "first_byte",
        "keep_alive",
        "started",
        "status",
    )

    def __init__(self, *, sse: bool) -> None:
        self._sse = sse
        self._inner = http1.ResponseParser()
        self._tail = b"\n"
        self.status = 0
        self.keep_alive = True
        self.body_bytes = 0
        self.first_byte = False
        self.started = False  # any byte of the response arrived
        self.done = False  # `data: [DONE]` seen
        self.errored = False  # an error frame seen

    @property
    def complete(self) -> bool:
        return self._inner.done

    def feed(self, data: bytes) -> None:
        """Consume bytes; raises `ProtocolError` on malformed input or bytes after the end."""
        inner = self._inner
        self.started = True
        try:
            body = inner.feed(data)
        except UpstreamMalformed as exc:
            raise ProtocolError(str(exc)) from None
        if inner.excess:
            raise ProtocolError("bytes after the end of the response")
        if not self.status and inner.head is not None:
            self.status = inner.head.status
            self.keep_alive = inner.head.keep_alive
        if body:
            self._body(body)
        if inner.done:
            self.first_byte = True  # an empty body (204, Content-Length: 0) is all there is

    def feed_eof(self) -> None:
        """The peer closed the connection; raises unless that ends the body."""
        self.keep_alive = False
        if not self.started:
            raise StaleConnection("connection closed before the response")
        try:
            self._inner.feed_eof()
        except UpstreamMalformed:
            if self._sse and 0 < self.status < 400 and not self.done:
                raise StreamCut("connection closed mid-stream") from None
            raise ProtocolError("connection closed mid-response") from None

    def _body(self, data: bytes) -> None:
        self.body_bytes += len(data)
        if not self._sse or self.status >= 400:
            self.first_byte = True
            return
        if self.done:
            return
        # Frames may split across reads: scan the new bytes plus a short tail of the previous ones.
        window = self._tail + data
        if not self.first_byte and b"\ndata:" in window:
            self.first_byte = True
        if b'\ndata: {"error"' in window:
            self.errored = True
        if b"\ndata: [DONE]" in window or b"\ndata:[DONE]" in window:
            self.done = True
        self._tail = window[-16:]


class _Transport(Protocol):
    async def send_all(self, data: bytes) -> None: ...

    async def receive_some(self, max_bytes: int) -> bytes | bytearray: ...

    async def aclose(self) -> None: ...


class _PlainSocket:
    """A connected non-blocking socket that only enters Trio's scheduler when it must wait.

    `trio.SocketStream` checkpoints twice per call; on a loaded core that doubles the driver's
    cost per request. The caller must still checkpoint once per request (`Connection` does).
    """

    __slots__ = ("_sock", "waits")

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self.waits = 0

    async def send_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                self.waits += 1
                await trio.lowlevel.wait_writable(self._sock)
                continue
            view = view[sent:]

    async def receive_some(self, max_bytes: int) -> bytes:
        while True:
            try:
                return self._sock.recv(max_bytes)
            except BlockingIOError:
                self.waits += 1
                await trio.lowlevel.wait_readable(self._sock)

    async def aclose(self) -> None:
        trio.lowlevel.notify_closing(self._sock)
        self._sock.close()
        await trio.lowlevel.checkpoint()


class Connection:
    """One HTTP/1.1 connection, reused for as long as the server keeps it alive.

    Not safe to share between tasks: each load worker owns one.
    """

    def __init__(self, transport: _Transport) -> None:
        self._transport = transport
        self._plain = transport if isinstance(transport, _PlainSocket) else None
        self.requests = 0  # exchanges completed on this connection
        self.reusable = True

    @classmethod
    async def open(cls, endpoint: Endpoint) -> Connection:
        """Connect; raises `ConnectError`. Cancellation abandons the attempt."""
        try:
            if endpoint.tls:
                ssl_stream = await trio.open_ssl_over_tcp_stream(
                    endpoint.host,
                    endpoint.port,
                    ssl_context=ssl.create_default_context(),
                    https_compatible=True,
                )
                return cls(ssl_stream)
            stream = await trio.open_tcp_stream(endpoint.host, endpoint.port)
        except (OSError, trio.BrokenResourceError) as exc:
            raise ConnectError(f"{endpoint.host}:{endpoint.port}: {exc}") from exc
        # Keep trio's connect logic (happy eyeballs, TCP_NODELAY), then take the bare socket.
        trio_sock = stream.socket
        sock = socket.socket(trio_sock.family, trio_sock.type, trio_sock.proto, trio_sock.detach())
        return cls(_PlainSocket(sock))

    async def request(self, payload: bytes, *, sse: bool) -> Response:
        """Send `payload` and read the whole response.

        Raises `HTTPClientError`; any error or a cancellation (a timeout) marks the connection
        not reusable. Always checkpoints at least once.
        """
        parser = ResponseParser(sse=sse)
        transport = self._transport
        waits = self._plain.waits if self._plain is not None else -1
        started = perf_counter()
        first = 0.0
        ok = False
        try:
            try:
                await transport.send_all(payload)
                while not parser.complete:
                    data = await transport.receive_some(_RECEIVE)
                    if not data:
                        parser.feed_eof()
                        break
                    parser.feed(data if type(data) is bytes else bytes(data))
                    if not first and parser.first_byte:
                        first = perf_counter()
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                if not parser.started:
                    raise StaleConnection(f"connection broken: {exc!r}") from exc
                if sse and 0 < parser.status < 400 and not parser.done:
                    raise StreamCut(f"connection broken mid-stream: {exc!r}") from exc
                raise ProtocolError(f"connection broken mid-response: {exc!r}") from exc
            ok = True
        finally:
            if not ok:
                self.reusable = False
        finished = perf_counter()
        if self._plain is not None and self._plain.waits == waits:
            await trio.lowlevel.checkpoint()  # the answer was already there: still yield once
        self.requests += 1
        if not parser.keep_alive:
            self.reusable = False
        if sse and parser.status < 400 and not parser.done:
            raise StreamCut("SSE body ended without data: [DONE]")
        if parser.errored:
            raise StreamError("SSE body ended with an error frame")
        return Response(parser.status, started, first or finished, finished, parser.body_bytes)

    async def aclose(self) -> None:
        """Close the connection; never raises for an already broken one."""
        self.reusable = False
        try:
            await self._transport.aclose()
        except (OSError, trio.BrokenResourceError):
            pass
