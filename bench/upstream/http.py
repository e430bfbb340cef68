"""Minimal HTTP/1.1 for the simulated upstream: a sans-I/O request parser and response bytes.

Covers what gateways and load drivers send: keep-alive, pipelining, request bodies framed by
Content-Length or `Transfer-Encoding: chunked`, `Expect: 100-continue`. Responses are framed by
Content-Length (JSON) or chunked (SSE). This module does no I/O and knows no routes; the server
owns the socket.

Exceptions:
    HttpError   the peer sent bytes we will not parse; answer `status`, then close.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus

MAX_HEAD = 64 * 1024
MAX_BODY = 32 * 1024 * 1024
_MAX_CHUNK_LINE = 1024
_HEX = frozenset(string.hexdigits)

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
    headers: dict[str, str]  # lower-cased names
    body: bytes
    keep_alive: bool


@dataclass(slots=True)
class _Head:
    method: str
    target: str
    headers: dict[str, str]
    keep_alive: bool
    expects_continue: bool
    content_length: int  # -1: chunked


class RequestParser:
    """Feed received bytes with `feed`; take complete requests with `next_request`.

    Several requests may be buffered at once (pipelining); call `next_request` until it returns
    None, then feed more. `take_continue` says (once) that a client waits for `100 Continue`.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._head: _Head | None = None
        self._chunked_body = bytearray()
        self._chunk_left: int | None = None  # None: size line next; -1: trailers next
        self._continue_due = False

    def feed(self, data: bytes) -> None:
        self._buf += data

    def take_continue(self) -> bool:
        due, self._continue_due = self._continue_due, False
        return due

    def next_request(self) -> Request | None:
        """The next complete request, or None when more bytes are needed. Raises HttpError."""
        head = self._head
        if head is None:
            head = self._head = self._parse_head()
            if head is None:
                return None
        if head.content_length >= 0:
            n = head.content_length
            if len(self._buf) < n:
                self._continue_due = head.expects_continue
                return None
            body = bytes(self._buf[:n])
            del self._buf[:n]
        else:
            if not self._read_chunks():
                self._continue_due = head.expects_continue
                return None
            body = bytes(self._chunked_body)
            self._chunked_body.clear()
        self._head = None
        self._continue_due = False
        return Request(head.method, head.target, head.headers, body, head.keep_alive)

    def _parse_head(self) -> _Head | None:
        buf = self._buf
        while buf[:2] == b"\r\n":  # RFC 9112 2.2: ignore empty lines before a request line
            del buf[:2]
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise HttpError(431, "request head too large")
            return None
        request_line, *lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        del buf[: end + 4]
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[0] or not parts[1]:
            raise HttpError(400, "malformed request line")
        method, target, version = parts
        if version != "HTTP/1.1" and version != "HTTP/1.0":
            raise HttpError(505, f"unsupported version {version!r}")
        headers: dict[str, str] = {}
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon or not name or name[-1] in " \t" or name[0] in " \t":
                raise HttpError(400, "malformed header line")
            name = name.lower()
            value = value.strip(" \t")
            if name in headers:
                if name == "content-length" and headers[name] != value:
                    raise HttpError(400, "conflicting content-length")
                if name != "content-length":
                    headers[name] += ", " + value
            else:
                headers[name] = value
        return _Head(
            method,
            target,
            headers,
            _keep_alive(version, headers.get("connection")),
            "expect" in headers and headers["expect"].lower() == "100-continue",
            _body_length(headers),
        )

    def _read_chunks(self) -> bool:
        """Move decoded chunk data from the buffer to the body; True once the body is done."""
        buf = self._buf
        while True:
            left = self._chunk_left
            if left is None or left == -1:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > (_MAX_CHUNK_LINE if left is None else MAX_HEAD):
                        raise HttpError(400, "chunk line too long")
                    return False
                line = bytes(buf[:end])
                del buf[: end + 2]
                if left == -1:
                    if not line:  # trailers are read and ignored
                        self._chunk_left = None
                        return True
                    continue
                size_text = line.split(b";", 1)[0].strip().decode("latin-1")
                if not size_text or not _HEX.issuperset(size_text):
                    raise HttpError(400, "bad chunk size")
                size = int(size_text, 16)
                if len(self._chunked_body) + size > MAX_BODY:
                    raise HttpError(413, "request body too large")
                self._chunk_left = size if size else -1
            else:
                if len(buf) < left + 2:
                    return False
                if buf[left : left + 2] != b"\r\n":
                    raise HttpError(400, "chunk data not followed by CRLF")
                self._chunked_body += buf[:left]
                del buf[: left + 2]
                self._chunk_left = None


def _keep_alive(version: str, connection: str | None) -> bool:
    if connection is None:
        return version == "HTTP/1.1"
    tokens = {t.strip().lower() for t in connection.split(",")}
    if version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens


def _body_length(headers: dict[str, str]) -> int:
    coding = headers.get("transfer-encoding")
    length = headers.get("content-length")
    if coding is not None:
        if coding.lower() != "chunked":
            raise HttpError(501, f"unsupported transfer-encoding {coding!r}")
        if length is not None:
            raise HttpError(400, "both content-length and transfer-encoding")
        return -1
    if length is None:
        return 0
    if not length.isdigit():
        raise HttpError(400, "bad content-length")
    n = int(length)
    if n > MAX_BODY:
        raise HttpError(413, "request body too large")
    return n


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
