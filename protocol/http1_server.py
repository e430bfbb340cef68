"""HTTP/1.1 request framing for the built-in server, no I/O: bytes in, events out.

llhttp (through httptools, strict: `set_dangerous_leniencies` is never called) decides where a
request's head and body start and end. It rejects CL+TE, duplicate or non-digit Content-Length,
bad chunk sizes, obs-fold, bare CR/LF, NUL and bad header names. This module adds what RFC 9112
asks and llhttp leaves to the application: a Transfer-Encoding other than exactly `chunked`
(llhttp takes `gzip, chunked`), Transfer-Encoding in HTTP/1.0, a version other than 1.0/1.1,
a missing or repeated Host in HTTP/1.1, and head size and header count limits. Trailer fields
of a chunked body count against those limits and are dropped, never added to the head's headers.

httptools cannot pause: one `feed` runs callbacks for every request in the bytes given
(pipelining). So events are queued, and the caller feeds only bytes it has read because it
needed them; `events` never holds more than one read's worth. After a `Reject` the parser
ignores everything (the connection must close). After `Upgrade` the bytes are not HTTP.

Events: `Request` (a head), `Body` (body bytes, in order), `End` (the message is complete),
`Reject` (status and reason: answer and close), `Upgrade` (a WebSocket handshake request was
read; carries the bytes after it).
"""

from __future__ import annotations

from collections import deque

import httptools

_METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")}
_FRAMING = frozenset((b"host", b"transfer-encoding", b"content-length", b"expect", b"upgrade"))
# A head line in progress is only seen once complete: this much slack over the limit bounds it.
_PARTIAL_SLACK = 64 * 1024


class Request:
    """One request head. `headers` have lower-cased names, as ASGI wants them."""

    __slots__ = (
        "content_length",
        "expects_continue",
        "headers",
        "http_version",
        "keep_alive",
        "method",
        "target",
        "websocket",
    )

    def __init__(
        self,
        method: str,
        target: bytes,
        http_version: str,
        headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
        expects_continue: bool,
        websocket: bool,
        content_length: int | None,
    ) -> None:
        self.method = method
        self.target = target
        self.http_version = http_version
        self.headers = headers
        self.keep_alive = keep_alive
        self.expects_continue = expects_continue
        self.websocket = websocket
        self.content_length = content_length  # None: chunked, or no body

    def __repr__(self) -> str:
        return f"Request({self.method} {self.target!r} HTTP/{self.http_version})"


class Body:
    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class End:
    __slots__ = ()


class Reject:
    __slots__ = ("reason", "status")

    def __init__(self, status: int, reason: str) -> None:
        self.status = status
        self.reason = reason

    def __repr__(self) -> str:
        return f"Reject({self.status}, {self.reason!r})"


class Upgrade:
    __slots__ = ("rest",)

    def __init__(self, rest: bytes) -> None:
        self.rest = rest


Event = Request | Body | End | Reject | Upgrade
END = End()


class _Rejected(Exception):
    pass


class RequestParser:
    """Feed request bytes; take events from `events`. See the module docstring."""

    def __init__(self, *, max_head_bytes: int, max_headers: int) -> None:
        self.events: deque[Event] = deque()
        self.done = False  # rejected or upgraded: feed no more
        self._max_head = max_head_bytes
        self._max_headers = max_headers
        self._parser = httptools.HttpRequestParser(self)
        self._reject: Reject | None = None
        self._new_message()
        self._in_head = False
        self._fed_in_head = 0
        self._websocket = False  # the last head asked for a WebSocket upgrade

    def _new_message(self) -> None:
        self._target = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_size = 0
        self._hosts = 0
        self._chunked = False
        self._length: int | None = None
        self._expect = False
        self._upgrade = b""

    def feed(self, data: bytes | bytearray) -> None:
        if self.done:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            rest = bytes(data[exc.args[0] :])
            if self._websocket:
                self.done = True
                self.events.append(Upgrade(rest))
                return
            # Another upgrade (h2c, CONNECT) is not taken: the request (which has no body, see
            # on_headers_complete) is served as plain HTTP/1.1 and parsing goes on after it.
            self._parser = httptools.HttpRequestParser(self)
            if rest:
                self.feed(rest)
            return
        except httptools.HttpParserError as exc:
            self._fail(self._reject or Reject(400, _reason(exc)))
            return
        if self._in_head:
            self._fed_in_head += len(data)
            if self._fed_in_head > self._max_head + _PARTIAL_SLACK:
                self._fail(Reject(431, "Request header fields too large."))

    def _fail(self, reject: Reject) -> None:
        self.done = True
        self.events.append(reject)

    def _refuse(self, status: int, reason: str) -> None:
        """From inside a callback: stop llhttp; `feed` then queues the Reject."""
        self._reject = Reject(status, reason)
        raise _Rejected(reason)

    # httptools callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_head = True
        self._fed_in_head = 0

    def on_url(self, url: bytes) -> None:
        self._target += url
        self._head_size += len(url)
        if self._head_size > self._max_head:
            self._refuse(431, "Request line too long.")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        if self._head_size > self._max_head:
            self._refuse(431, "Request header fields too large.")
        if len(self._headers) >= self._max_headers:
            self._refuse(431, "Too many request header fields.")
        if not self._in_head:
            # A chunked body's trailer field: counted against the limits, then dropped (RFC 9110
            # 6.5.1). Appended, it would join the head's list after the app may have read it.
            return
        name = name.lower()
        self._headers.append((name, value))
        if name not in _FRAMING:
            return
        if name == b"host":
            self._hosts += 1
        elif name == b"transfer-encoding":
            # RFC 9112 6.1: chunked must be the final coding; we decode no other coding.
            if value.lower() != b"chunked":
                self._refuse(400, "Unsupported Transfer-Encoding.")
            self._chunked = True
        elif name == b"content-length":
            self._length = int(value) if value.isdigit() else None  # llhttp checks it
        elif name == b"expect":
            self._expect = value.lower() == b"100-continue"
        elif name == b"upgrade":
            self._upgrade = value.lower()

    def on_headers_complete(self) -> None:
        parser = self._parser
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):
            if version >= "2":
                self._refuse(505, "HTTP version not supported.")
            self._refuse(400, "HTTP version not supported.")
        if version == "1.1" and self._hosts != 1:
            self._refuse(400, "Exactly one Host header is required.")
        if self._chunked and version == "1.0":
            self._refuse(400, "Transfer-Encoding in an HTTP/1.0 request.")
        method = parser.get_method()
        upgrade = parser.should_upgrade()
        if upgrade:
            # The bytes after an upgrade request's head are not parsed as its body by llhttp.
            if self._chunked or self._length:
                self._refuse(400, "An upgrade request must not have a body.")
            self._websocket = method == b"GET" and b"websocket" in self._upgrade
        self._in_head = False
        self.events.append(
            Request(
                _METHODS.get(method) or method.decode("latin-1"),
                self._target,
                version,
                self._headers,
                parser.should_keep_alive() and not upgrade,
                self._expect and version == "1.1",
                self._websocket,
                self._length,
            )
        )

    def on_body(self, body: bytes) -> None:
        self.events.append(Body(body))

    def on_message_complete(self) -> None:
        self.events.append(END)
        self._new_message()


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or "Malformed HTTP request"
    return text if text.endswith(".") else text + "."
