"""HTTP/1.1 response framing for the upstream pool (protocol/http1_client.py), byte by byte."""

from __future__ import annotations

import time

import pytest

from protocol.errors import UpstreamMalformed
from protocol.http1_client import (
    MAX_HEAD,
    MAX_INTERIM,
    ResponseParser,
    format_request,
)

H = b"HTTP/1.1 200 OK\r\n"


def _parse(raw: bytes, step: int) -> tuple[ResponseParser, bytes]:
    parser = ResponseParser()
    body = b"".join(parser.feed(raw[i : i + step]) for i in range(0, len(raw), step))
    return parser, body


def test_request_is_one_buffer() -> None:
    data = format_request("POST", "/v1/x", "h:1", b"A: b\r\n", b"{}")
    assert data == b"POST /v1/x HTTP/1.1\r\nHost: h:1\r\nContent-Length: 2\r\nA: b\r\n\r\n{}"


def test_head_needs_all_its_bytes_and_skips_interim_responses() -> None:
    raw = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\nX: 1\r\nx: 2\r\nContent-Length: 0\r\n\r\n"
    )
    parser = ResponseParser()
    parser.feed(raw[:-1])
    assert parser.head is None
    parser.feed(raw[-1:])
    head = parser.head
    assert head is not None and head.status == 429 and head.keep_alive
    assert head.headers["retry-after"] == "7" and head.headers["x"] == "1, 2"
    assert parser.done and parser.reusable


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_content_length_and_chunked_bodies(step: int) -> None:
    parser, body = _parse(H + b"Content-Length: 5\r\n\r\nhello", step)
    assert body == b"hello" and parser.reusable
    chunked = (
        H + b"Transfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nTrailer: x\r\n\r\n"
    )
    parser, body = _parse(chunked, step)
    assert body == b"hello world" and parser.reusable
    assert parser.head is not None and "trailer" not in parser.head.headers


def test_close_delimited_body_ends_at_eof() -> None:
    parser, body = _parse(b"HTTP/1.0 200 OK\r\n\r\nabc", 2)
    assert body == b"abc" and not parser.done
    parser.feed_eof()
    assert parser.done and not parser.reusable


@pytest.mark.parametrize(
    "raw",
    [
        H + b"Content-Length: 5\r\n\r\nab",
        H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nab",
        H + b"Content-Le",
        b"",
    ],
)
def test_eof_before_the_end_is_an_error(raw: bytes) -> None:
    parser, _ = _parse(raw, 1000)
    with pytest.raises(UpstreamMalformed, match="closed before"):
        parser.feed_eof()


@pytest.mark.parametrize(
    "raw",
    [
        b"SSH-2.0\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n",
        H + b"broken header\r\n\r\n",
        H + b"Transfer-Encoding: xchunked\r\n\r\n",
        H + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        H + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
        H + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n",
        H + b"Content-Length: +2\r\n\r\n",
        H + b"Content-Length: 1_0\r\n\r\n",
        H + b"Transfer-Encoding: chunked\r\n\r\n0x10\r\n",
        H + b"Transfer-Encoding: chunked\r\n\r\n2\r\nabc",
    ],
)
@pytest.mark.parametrize("step", [1, 1000])
def test_malformed_responses_raise(raw: bytes, step: int) -> None:
    with pytest.raises(UpstreamMalformed):
        _parse(raw, step)


def test_bytes_after_the_response_make_it_not_reusable() -> None:
    for extra in (b"X", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"):
        parser, body = _parse(H + b"Content-Length: 2\r\n\r\n{}" + extra, 1000)
        assert body == b"{}" and parser.done and parser.excess and not parser.reusable
    # Data after `Connection: close` too (llhttp refuses it: it is excess here).
    parser, body = _parse(H + b"Connection: close\r\nContent-Length: 2\r\n\r\n{}X", 1000)
    assert body == b"{}" and parser.excess
    # 204 has no body whatever its Content-Length says: the bytes are excess.
    parser, _ = _parse(b"HTTP/1.1 204 No\r\nContent-Length: 3\r\n\r\nabc", 1000)
    assert parser.done and parser.excess


def test_the_head_is_bounded() -> None:
    parser = ResponseParser()
    parser.feed(H + b"X: ")
    with pytest.raises(UpstreamMalformed, match="head over"):
        for _ in range(MAX_HEAD // 1000 + 2):
            parser.feed(b"a" * 1000)
    with pytest.raises(UpstreamMalformed, match="header fields"):
        _parse(H + b"X: 1\r\n" * 101 + b"\r\n", 1000)
    big = H + b"X: " + b"a" * (MAX_HEAD - 100) + b"\r\nContent-Length: 2\r\n\r\n{}"
    assert _parse(big, 4096)[1] == b"{}"


def test_an_endless_chunk_size_line_is_bounded() -> None:
    parser = ResponseParser()
    parser.feed(H + b"Transfer-Encoding: chunked\r\n\r\n1;")
    with pytest.raises(UpstreamMalformed, match="without body data"):
        for _ in range(MAX_HEAD // 1000 + 2):
            parser.feed(b"x" * 1000)


def test_interim_responses_are_capped_in_linear_time() -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    _parse(interim * MAX_INTERIM + H + b"Content-Length: 0\r\n\r\n", 1000)
    started = time.perf_counter()
    with pytest.raises(UpstreamMalformed, match="interim"):
        _parse(interim * 100_000, 65536)
    assert time.perf_counter() - started < 0.5
