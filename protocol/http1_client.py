"""HTTP/1.1 for the upstream client, no I/O: request bytes out, response head and body in.

Responses are framed by llhttp (`httptools.HttpResponseParser`) in its strict mode — no
leniency is ever enabled. llhttp pushes callbacks and cannot pause, so `ResponseParser` wraps
it: the pool feeds it what the connection receives, and each `feed` returns the body bytes in
those bytes; `head` is set once the final (non-1xx) head is complete, `done` once the response
ended, and `reusable` says whether the connection may carry another request.

On top of llhttp's checks (bad or duplicate Content-Length, Content-Length with
Transfer-Encoding, bad chunk sizes, malformed lines, data after `Connection: close`) it refuses
what the gateway never asked for or cannot bound: a Transfer-Encoding other than `chunked`, a
version other than 1.0/1.1, a status outside 100–599, 101, more than `MAX_INTERIM` 1xx responses,
a head (interim heads included) over `MAX_HEAD` bytes or `MAX_HEADERS` fields, and more than
`MAX_HEAD` bytes in a row without body data (an endless chunk-size line, extension or trailer).
Every refusal is a `UpstreamMalformed`; the cost of parsing stays linear in the bytes fed.

Bytes after the end of the response mean the peer is out of step: llhttp starts a next message
on them, which stops the parser and marks the response `excess`, not reusable (CR/LF between
messages are skipped by llhttp, as RFC 9112 §2.2 allows, and go nowhere). Header fields stay raw
bytes until `ResponseHead.headers` is first read: the hot path decodes none. It must not grow
into a general client: no redirects, no pipelining, no decompression; trailers are dropped.
"""

from __future__ import annotations

from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser

from protocol.errors import UpstreamMalformed

MAX_HEAD = 64 * 1024
MAX_HEADERS = 100
MAX_INTERIM = 10
_VERSIONS = ("1.1", "1.0")


def format_request(method: str, target: str, authority: str, headers: bytes, body: bytes) -> bytes:
    """The whole request in one buffer (one send). `headers` are pre-formatted
    `Name: value\\r\\n` lines without Host and Content-Length."""
    head = (
        f"{method} {target} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {len(body)}\r\n"
    ).encode("latin-1")
    return b"".join((head, headers, b"\r\n", body))


def format_request_head(method: str, target: str, authority: str, headers: bytes) -> bytes:
    """The head of a request whose body follows in chunks (`format_chunk`)."""
    head = f"{method} {target} HTTP/1.1\r\nHost: {authority}\r\nTransfer-Encoding: chunked\r\n"
    return b"".join((head.encode("latin-1"), headers, b"\r\n"))


def format_chunk(data: bytes) -> bytes:
    """One chunk of a chunked body; b"" gives the last chunk (and the empty trailer)."""
    return b"%x\r\n%b\r\n" % (len(data), data) if data else b"0\r\n\r\n"


def format_headers(pairs: dict[str, str]) -> bytes:
    return "".join(f"{k}: {v}\r\n" for k, v in pairs.items()).encode("latin-1")


class ResponseHead:
    """A final response head. `headers` (lower-cased names, repeated fields joined with ", ")
    is built on first use: most calls only need the status."""

    __slots__ = ("_fields", "_headers", "content_length", "keep_alive", "status")

    def __init__(
        self, status: int, fields: list[bytes], keep_alive: bool, content_length: int | None
    ) -> None:
        self.status = status
        self.keep_alive = keep_alive
        self.content_length = content_length  # as framed by llhttp (which checked it)
        self._fields = fields  # name, value, name, value...
        self._headers: dict[str, str] | None = None

    @property
    def headers(self) -> dict[str, str]:
        if self._headers is None:
            headers: dict[str, str] = {}
            fields = self._fields
            for i in range(0, len(fields), 2):
                key = fields[i].decode("latin-1").lower()
                text = fields[i + 1].decode("latin-1").strip()
                headers[key] = f"{headers[key]}, {text}" if key in headers else text
            self._headers = headers
        return self._headers

    def __repr__(self) -> str:
        return f"ResponseHead({self.status}, {self.headers!r}, keep_alive={self.keep_alive})"


class _Excess(Exception):
    """Raised from llhttp's callback to stop it at the start of a message after ours."""


class ResponseParser:
    """One response, fed as it arrives. Not reusable for a second response."""

    __slots__ = (
        "_body",
        "_encoding",
        "_fields",
        "_length",
        "_interim",
        "_parser",
        "_seen",
        "_stalled",
        "_until_close",
        "done",
        "excess",
        "head",
    )

    def __init__(self) -> None:
        self.head: ResponseHead | None = None
        self.done = False
        self.excess = False  # bytes arrived after the end of the response
        self._parser = HttpResponseParser(self)
        self._fields: list[bytes] = []
        self._encoding: bytes | None = None
        self._length: int | None = None
        self._interim = 0
        self._seen = 0  # bytes fed before the head was complete
        self._stalled = 0  # bytes fed since the last body data, once the head is complete
        self._body: list[bytes] = []
        self._until_close = False

    @property
    def reusable(self) -> bool:
        """Whether the connection can carry another request (meaningful once `done`)."""
        head = self.head
        return self.done and not self.excess and head is not None and head.keep_alive

    def feed(self, data: bytes) -> bytes:
        """Parse `data`; return the body bytes in it (chunked framing removed). Raises
        UpstreamMalformed; bytes after the end of the response set `excess` instead."""
        if self.done:
            if data:
                self.excess = True
            return b""
        in_head = self.head is None
        if in_head:
            self._seen += len(data)
        try:
            self._parser.feed_data(data)
        except HttpParserUpgrade:
            raise UpstreamMalformed("101 Switching Protocols (no upgrade was asked for)") from None
        except HttpParserError as exc:
            if self.done:  # _Excess, or llhttp refusing data after `Connection: close`
                self.excess = True
            elif isinstance(exc.__context__, UpstreamMalformed):  # raised by a callback below
                raise exc.__context__ from None
            else:
                raise UpstreamMalformed(str(exc)) from None
        body = self._body
        if self.head is None:
            if self._seen > MAX_HEAD:  # after feeding: the head may end within `data`
                raise UpstreamMalformed(f"response head over {MAX_HEAD} bytes")
            return b""
        if not body:
            if not (self.done or in_head):
                self._stalled += len(data)
                if self._stalled > MAX_HEAD:
                    raise UpstreamMalformed(f"{self._stalled} bytes without body data")
            return b""
        self._stalled = 0
        self._body = []
        return body[0] if len(body) == 1 else b"".join(body)

    def feed_eof(self) -> None:
        """The peer closed the connection: the end of a close-delimited body, else an error."""
        if self.done:
            return
        if self.head is not None and self._until_close:
            self.done = True
            return
        where = "head" if self.head is None else "body"
        raise UpstreamMalformed(f"connection closed before the end of the response {where}")

    # llhttp's callbacks (called from within `feed_data`)

    def on_message_begin(self) -> None:
        if self.done:
            raise _Excess
        self._fields = []
        self._encoding = None
        self._length = None

    def on_header(self, name: bytes, value: bytes) -> None:
        fields = self._fields
        fields.append(name)
        fields.append(value)
        if len(fields) > 2 * MAX_HEADERS:
            raise UpstreamMalformed(f"more than {MAX_HEADERS} header fields")
        if len(name) == 17 or len(name) == 14:  # Transfer-Encoding, Content-Length
            lowered = name.lower()
            if lowered == b"transfer-encoding":
                if self._encoding is not None or value.strip().lower() != b"chunked":
                    raise UpstreamMalformed(f"Transfer-Encoding {value!r} (only chunked is read)")
                self._encoding = value
            elif lowered == b"content-length":
                self._length = int(value)  # llhttp refuses a bad or second Content-Length

    def on_headers_complete(self) -> None:
        parser = self._parser
        status = parser.get_status_code()
        if status < 200:
            self._interim += 1
            if self._interim > MAX_INTERIM:
                raise UpstreamMalformed(f"more than {MAX_INTERIM} interim responses")
            if status == 101 or status < 100:  # never asked to upgrade; 0xx is no status
                raise UpstreamMalformed(f"status {status}")
            return
        if status > 599:
            raise UpstreamMalformed(f"status {status}")
        if parser.get_http_version() not in _VERSIONS:
            raise UpstreamMalformed(f"HTTP version {parser.get_http_version()}")
        length = self._length
        self._until_close = not (self._encoding or length is not None or status in (204, 304))
        self.head = ResponseHead(status, self._fields, parser.should_keep_alive(), length)
        self._fields = []  # trailers, if any, are counted and dropped

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self.head is not None:
            self.done = True
