"""HTTP/1.1 response framing for the upstream pool, byte by byte."""

from __future__ import annotations

import pytest

from protocol.http1 import BodyReader, HTTPProtocolError, format_request, parse_head


def _body(raw: bytes, step: int) -> bytes:
    parsed = parse_head(raw)
    assert parsed is not None
    head, offset = parsed
    reader = BodyReader(head)
    out = b""
    rest = raw[offset:]
    for i in range(0, len(rest), step):
        out += reader.feed(rest[i : i + step])
    assert reader.done
    return out


def test_request_is_one_buffer() -> None:
    data = format_request("POST", "/v1/x", "h:1", b"A: b\r\n", b"{}")
    assert data == b"POST /v1/x HTTP/1.1\r\nHost: h:1\r\nContent-Length: 2\r\nA: b\r\n\r\n{}"


def test_head_needs_all_its_bytes_and_skips_interim_responses() -> None:
    raw = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\nX: 1\r\nx: 2\r\n\r\n"
    )
    assert parse_head(raw[:-1]) is None
    parsed = parse_head(raw)
    assert parsed is not None
    head, offset = parsed
    assert head.status == 429 and head.headers["retry-after"] == "7"
    assert head.headers["x"] == "1, 2" and offset == len(raw) and head.keep_alive


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_content_length_and_chunked_bodies(step: int) -> None:
    assert _body(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", step) == b"hello"
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nTrailer: x\r\n\r\n"
    )
    assert _body(chunked, step) == b"hello world"


def test_close_delimited_body_and_connection_close() -> None:
    parsed = parse_head(b"HTTP/1.0 200 OK\r\n\r\n")
    assert parsed is not None
    head, _ = parsed
    assert not head.keep_alive
    reader = BodyReader(head)
    assert reader.feed(b"abc") == b"abc" and not reader.done and not reader.reusable
    reader.eof()
    assert reader.done


@pytest.mark.parametrize(
    "raw",
    [
        b"SSH-2.0\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n",
    ],
)
def test_malformed_heads_raise(raw: bytes) -> None:
    with pytest.raises(HTTPProtocolError):
        parse_head(raw)


def test_malformed_bodies_raise_and_excess_is_kept() -> None:
    parsed = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
    assert parsed is not None
    extra = BodyReader(parsed[0])
    assert extra.feed(b"abc") == b"ab" and extra.done and extra.excess == b"c"
    reader = BodyReader(parsed[0])
    reader.feed(b"a")
    with pytest.raises(HTTPProtocolError):
        reader.eof()
    chunked = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert chunked is not None
    with pytest.raises(HTTPProtocolError):
        BodyReader(chunked[0]).feed(b"zz\r\n")
