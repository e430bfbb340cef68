"""HTTP/1.1 client-side framing, no I/O: request bytes out, response head and body in.

The gateway's upstream calls need little of HTTP: one POST with a known body, a status, a few
headers, and a body framed by Content-Length, chunked encoding, or connection close. Doing only
that keeps the per-request cost a fraction of a general client's. It must not grow into one:
no redirects, no pipelining, no decompression, no trailers (they are skipped).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

MAX_HEAD = 64 * 1024


class HTTPProtocolError(Exception):
    """The peer broke HTTP/1.1 framing."""


def format_request(method: str, target: str, authority: str, headers: bytes, body: bytes) -> bytes:
    """The whole request in one buffer (one send). `headers` are pre-formatted
    `Name: value\\r\\n` lines without Host and Content-Length."""
    head = (
        f"{method} {target} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {len(body)}\r\n"
    ).encode("latin-1")
    return b"".join((head, headers, b"\r\n", body))


def format_headers(pairs: dict[str, str]) -> bytes:
    return "".join(f"{k}: {v}\r\n" for k, v in pairs.items()).encode("latin-1")


@dataclass(frozen=True, slots=True)
class ResponseHead:
    status: int
    headers: dict[str, str]  # lower-cased names; repeated headers joined with ", "
    keep_alive: bool


def parse_head(data: bytes) -> tuple[ResponseHead, int] | None:
    """The head if `data` holds all of it, and the offset where the body starts; None if more
    bytes are needed. 1xx interim responses are skipped."""
    offset = 0
    while True:
        end = data.find(b"\r\n\r\n", offset)
        if end < 0:
            if len(data) - offset > MAX_HEAD:
                raise HTTPProtocolError("response head too large")
            return None
        lines = data[offset:end].split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
            raise HTTPProtocolError("not an HTTP/1.x response")
        try:
            status = int(status_line[1])
        except ValueError:
            raise HTTPProtocolError("bad status code") from None
        offset = end + 4
        if 100 <= status < 200:
            continue
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise HTTPProtocolError("malformed header line")
            key = name.strip().lower().decode("latin-1")
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        connection = headers.get("connection", "").lower()
        keep_alive = status_line[0] == b"HTTP/1.1" and "close" not in connection
        return ResponseHead(status, headers, keep_alive), offset


class _Mode(enum.Enum):
    LENGTH = 1
    CHUNKED = 2
    UNTIL_CLOSE = 3


class BodyReader:
    """Decodes a message body as bytes arrive. `feed` returns the body bytes in them; `done`
    turns true at the body's end, and bytes fed past it are kept in `excess` (on a server
    connection: the start of the next request; from an upstream: a protocol error)."""

    def __init__(self, head: ResponseHead, *, head_request: bool = False) -> None:
        self.done = False
        self.excess = b""
        self._remaining = 0
        self._buffer = b""
        encoding = head.headers.get("transfer-encoding", "").lower()
        if head_request or head.status in (204, 304):
            self._mode = _Mode.LENGTH
            self.done = True
        elif "chunked" in encoding:
            self._mode = _Mode.CHUNKED
            self._chunk_left = -1  # -1: expecting a size line
        elif "content-length" in head.headers:
            self._mode = _Mode.LENGTH
            try:
                self._remaining = int(head.headers["content-length"])
            except ValueError:
                raise HTTPProtocolError("bad Content-Length") from None
            self.done = self._remaining == 0
        else:
            self._mode = _Mode.UNTIL_CLOSE

    @property
    def reusable(self) -> bool:
        """Whether the connection can carry another request once this body is done."""
        return self._mode is not _Mode.UNTIL_CLOSE

    def feed(self, data: bytes) -> bytes:
        if self._mode is _Mode.LENGTH:
            if len(data) > self._remaining:
                data, self.excess = data[: self._remaining], data[self._remaining :]
            self._remaining -= len(data)
            self.done = self._remaining == 0
            return data
        if self._mode is _Mode.UNTIL_CLOSE:
            return data
        return self._feed_chunked(data)

    def eof(self) -> None:
        """The connection closed; an error unless that ends the body."""
        if self._mode is _Mode.UNTIL_CLOSE:
            self.done = True
        elif not self.done:
            raise HTTPProtocolError("connection closed before the end of the body")

    def _feed_chunked(self, data: bytes) -> bytes:
        buf = self._buffer + data if self._buffer else data
        out: list[bytes] = []
        pos = 0
        while pos < len(buf) and not self.done:
            if self._chunk_left > 0:
                take = buf[pos : pos + self._chunk_left]
                out.append(take)
                self._chunk_left -= len(take)
                pos += len(take)
                if self._chunk_left == 0:
                    self._chunk_left = -2  # expecting the CRLF after the data
                continue
            end = buf.find(b"\r\n", pos)
            if end < 0:
                if len(buf) - pos > 4096:
                    raise HTTPProtocolError("chunk size line too long")
                break
            line = buf[pos:end]
            pos = end + 2
            if self._chunk_left == -2:
                if line:
                    raise HTTPProtocolError("missing CRLF after chunk data")
                self._chunk_left = -1
            elif self._chunk_left == -1:
                try:
                    size = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise HTTPProtocolError("bad chunk size") from None
                self._chunk_left = size if size else -3
            elif not line:  # -3: trailers end with an empty line
                self.done = True
        if self.done:
            self.excess = buf[pos:]
            self._buffer = b""
        else:
            self._buffer = buf[pos:]
        return b"".join(out)


# --- server side -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    target: bytes
    http_version: str  # "1.1" or "1.0"
    headers: list[tuple[bytes, bytes]]  # names lower-cased, as ASGI wants them
    keep_alive: bool
    expects_continue: bool


def parse_request_head(data: bytes | bytearray) -> tuple[RequestHead, int] | None:
    """A request head if `data` holds all of it, and where the body starts; None if more
    bytes are needed. Raises HTTPProtocolError for a malformed or oversized head."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > MAX_HEAD:
            raise HTTPProtocolError("request head too large")
        return None
    if end > MAX_HEAD:
        raise HTTPProtocolError("request head too large")
    lines = bytes(data[:end]).split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise HTTPProtocolError("malformed request line")
    method, target, version = parts
    if not method.isalpha() or not target:
        raise HTTPProtocolError("malformed request line")
    headers: list[tuple[bytes, bytes]] = []
    connection = b""
    expect = b""
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise HTTPProtocolError("malformed header line")
        key = name.lower()
        value = value.strip()
        headers.append((key, value))
        if key == b"connection":
            connection = value.lower()
        elif key == b"expect":
            expect = value.lower()
    http_version = version[5:].decode("latin-1")
    if http_version == "1.1":
        keep_alive = b"close" not in connection
    else:
        keep_alive = b"keep-alive" in connection
    head = RequestHead(
        method.decode("latin-1"),
        target,
        http_version,
        headers,
        keep_alive,
        expect == b"100-continue",
    )
    return head, end + 4


def request_body_reader(head: RequestHead) -> BodyReader:
    """How this request's body is framed; a request without either header has none."""
    values = dict(head.headers)
    if b"chunked" in values.get(b"transfer-encoding", b"").lower():
        framing = {"transfer-encoding": "chunked"}
    else:
        framing = {"content-length": values.get(b"content-length", b"0").decode("latin-1")}
    return BodyReader(ResponseHead(200, framing, True))
