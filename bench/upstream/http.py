"""HTTP/1.1 for the simulated upstream: whole requests from the gateway's llhttp wrapper, and
response bytes.

Request framing is protocol/http1_server.py's, the same strict llhttp parser the gateway's own
server uses: request line, headers, bodies framed by Content-Length or `Transfer-Encoding:
chunked` (trailers dropped), keep-alive, pipelining, `Expect: 100-continue`. This module only
assembles its events into whole requests (bodies are buffered: routes want them whole) and
adds the body limit. Responses are framed by Content-Length (JSON) or chunked (SSE). No I/O and
no routes here; the server owns the socket.

Exceptions:
    HttpError   the peer sent bytes we will not parse; answer `status`, then close.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus

from protocol import http1_server as h1

MAX_HEAD = 64 * 1024
MAX_HEADERS = 256
MAX_BODY = 32 * 1024 * 1024

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"


class HttpError(Exception):
    """The request is malformed or unsupported; the connection cannot be reused."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)  # not frozen: frozen construction costs 4x, and this is made per request
class Request:
    method: str
    target: str
    headers: dict[str, str]  # lower-cased names, repeats joined with ", "
    body: bytes
    keep_alive: bool


class RequestReader:
    """Feed received bytes with `feed`; take complete requests with `next_request`.

    Several requests may be buffered at once (pipelining); call `next_request` until it returns
    None, then feed more. `take_continue` says (once per request) that a client waits for
    `100 Continue` before it sends the body.
    """

    def __init__(self) -> None:
        self._parser = h1.RequestParser(max_head_bytes=MAX_HEAD, max_headers=MAX_HEADERS)
        self._head: h1.Request | None = None
        self._body: list[bytes] = []
        self._size = 0
        self._continue_due = False

    def feed(self, data: bytes) -> None:
        self._parser.feed(data)

    def take_continue(self) -> bool:
        due, self._continue_due = self._continue_due, False
        return due

    def next_request(self) -> Request | None:
        """The next complete request, or None when more bytes are needed. Raises HttpError."""
        events = self._parser.events
        while events:
            event = events.popleft()
            if event is h1.END:
                return self._complete()
            if isinstance(event, h1.Body):
                self._size += len(event.data)
                if self._size > MAX_BODY:
                    raise HttpError(413, "request body too large")
                self._body.append(event.data)
            elif isinstance(event, h1.Request):
                if event.content_length is not None and event.content_length > MAX_BODY:
                    raise HttpError(413, "request body too large")
                self._head = event
                self._continue_due = event.expects_continue
            elif isinstance(event, h1.Reject):
                raise HttpError(event.status, event.reason)
            else:  # Upgrade: a WebSocket handshake; the bytes after it are not HTTP
                raise HttpError(400, "protocol upgrades are not supported")
        return None

    def _complete(self) -> Request:
        head = self._head
        assert head is not None  # llhttp ends no message it did not begin
        body = self._body
        data = body[0] if len(body) == 1 else b"".join(body)
        self._head = None
        self._body = []
        self._size = 0
        self._continue_due = False
        headers: dict[str, str] = {}
        for name, value in head.headers:
            key = name.decode("latin-1")
            text = value.rstrip(b" \t").decode("latin-1")  # llhttp keeps trailing whitespace
            headers[key] = headers[key] + ", " + text if key in headers else text
        return Request(head.method, head.target.decode("latin-1"), headers, data, head.keep_alive)


_prefixes: dict[tuple[int, bytes], bytes] = {}


def _status_line(status: int) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Error"
    return f"HTTP/1.1 {status} {reason}\r\n".encode()


def _extra(headers: Sequence[tuple[str, str]], close: bool) -> bytes:
    lines = [f"{name}: {value}\r\n".encode("latin-1") for name, value in headers]
    if close:
        lines.append(b"connection: close\r\n")
    return b"".join(lines)


def json_response(
    status: int,
    body: bytes,
    *,
    headers: Sequence[tuple[str, str]] = (),
    close: bool = False,
    content_type: bytes = b"application/json",
) -> bytes:
    """A complete response framed by Content-Length."""
    prefix = _prefixes.get((status, content_type))
    if prefix is None:
        prefix = _status_line(status) + b"content-type: " + content_type + b"\r\n"
        _prefixes[(status, content_type)] = prefix
    tail = b"content-length: %d\r\n" % len(body)
    if headers or close:
        tail += _extra(headers, close)
    return prefix + tail + b"\r\n" + body


def stream_head(*, close: bool = False) -> bytes:
    """Headers of a chunked `text/event-stream` response; the body follows as `chunk`s."""
    return _SSE_HEAD_CLOSE if close else _SSE_HEAD


_SSE_HEAD = (
    _status_line(200)
    + b"content-type: text/event-stream\r\ncache-control: no-cache\r\n"
    + b"transfer-encoding: chunked\r\n"
)
_SSE_HEAD_CLOSE = _SSE_HEAD + b"connection: close\r\n\r\n"
_SSE_HEAD += b"connection: keep-alive\r\n\r\n"


def chunk(payload: bytes) -> bytes:
    """One chunk of a chunked body (never empty: an empty chunk would end the body)."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)
