"""The simulated upstream's HTTP/1.1 parser and response bytes, without sockets."""

from __future__ import annotations

import pytest

from bench.upstream.http import (
    MAX_HEAD,
    HttpError,
    Request,
    RequestParser,
    chunk,
    json_response,
    stream_head,
)

GET = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Many: a\r\nx-many: b\r\n\r\n"
POST = b"POST /v1/embeddings HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"


def parse_all(parser: RequestParser, data: bytes) -> list[Request]:
    parser.feed(data)
    out = []
    while (request := parser.next_request()) is not None:
        out.append(request)
    return out


def test_headers_are_lower_cased_and_repeats_joined() -> None:
    [request] = parse_all(RequestParser(), GET)
    assert (request.method, request.target, request.body) == ("GET", "/v1/models", b"")
    assert request.headers == {"host": "x", "x-many": "a, b"}
    assert request.keep_alive


def test_bytes_fed_one_at_a_time_and_pipelined() -> None:
    parser = RequestParser()
    requests: list[Request] = []
    for byte in GET + POST + GET:
        requests += parse_all(parser, bytes([byte]))
    assert [r.target for r in requests] == ["/v1/models", "/v1/embeddings", "/v1/models"]
    assert requests[1].body == b"hello"


def test_chunked_body_with_extensions_and_trailers() -> None:
    data = (
        b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    parser = RequestParser()
    assert parse_all(parser, data[:40]) == []
    chunked, after = parse_all(parser, data[40:] + POST)
    assert chunked.body == b"hello world"
    assert after.body == b"hello"


def test_connection_close_and_http_1_0() -> None:
    close = b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"
    old = b"GET / HTTP/1.0\r\n\r\n"
    old_keep = b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"
    assert [r.keep_alive for r in parse_all(RequestParser(), close + old + old_keep)] == [
        False,
        False,
        True,
    ]


def test_expect_continue_is_offered_once_while_the_body_is_missing() -> None:
    parser = RequestParser()
    head = b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    assert parse_all(parser, head) == []
    assert parser.take_continue() and not parser.take_continue()
    [request] = parse_all(parser, b"ok")
    assert request.body == b"ok" and not parser.take_continue()


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nName : v\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nab\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n", 413),
        (b"GET / HTTP/1.1\r\n" + b"x" * (MAX_HEAD + 1), 431),
    ],
)
def test_malformed_requests(data: bytes, status: int) -> None:
    with pytest.raises(HttpError) as caught:
        parse_all(RequestParser(), data)
    assert caught.value.status == status


def test_response_bytes() -> None:
    assert json_response(200, b"{}") == (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    )
    failed = json_response(529, b"{}", headers=[("retry-after", "3")], close=True)
    assert failed.startswith(b"HTTP/1.1 529 ")
    assert b"\r\nretry-after: 3\r\nconnection: close\r\n\r\n{}" in failed
    assert stream_head().endswith(b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n")
    assert b"connection: close" in stream_head(close=True)
    assert chunk(b"x" * 26) == b"1a\r\n" + b"x" * 26 + b"\r\n"
