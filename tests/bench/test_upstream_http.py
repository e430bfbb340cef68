"""The simulated upstream's request assembly (over protocol/http1_server.py's llhttp parser) and
response bytes, without sockets."""

from __future__ import annotations

import pytest

from bench.upstream.http import (
    MAX_BODY,
    MAX_HEAD,
    HttpError,
    Request,
    RequestReader,
    chunk,
    json_response,
    stream_head,
)

GET = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Many: a\r\nx-many: b \r\n\r\n"
POST = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"


def parse_all(reader: RequestReader, data: bytes) -> list[Request]:
    reader.feed(data)
    out = []
    while (request := reader.next_request()) is not None:
        out.append(request)
    return out


def test_headers_are_lower_cased_trimmed_and_repeats_joined() -> None:
    [request] = parse_all(RequestReader(), GET)
    assert (request.method, request.target, request.body) == ("GET", "/v1/models", b"")
    assert request.headers == {"host": "x", "x-many": "a, b"}
    assert request.keep_alive


def test_bytes_fed_one_at_a_time_and_pipelined() -> None:
    reader = RequestReader()
    requests: list[Request] = []
    for byte in b"\r\n" + GET + POST + GET:
        requests += parse_all(reader, bytes([byte]))
    assert [r.target for r in requests] == ["/v1/models", "/v1/embeddings", "/v1/models"]
    assert requests[1].body == b"hello"


def test_chunked_body_with_extensions_and_trailers() -> None:
    data = (
        b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    reader = RequestReader()
    assert parse_all(reader, data[:60]) == []
    chunked, after = parse_all(reader, data[60:] + POST)
    assert chunked.body == b"hello world"
    assert "x-trailer" not in chunked.headers  # trailers are dropped
    assert after.body == b"hello"


def test_connection_close_and_http_1_0() -> None:
    close = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    old = b"GET / HTTP/1.0\r\n\r\n"
    old_keep = b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"
    assert [r.keep_alive for r in parse_all(RequestReader(), close)] == [False]
    assert [r.keep_alive for r in parse_all(RequestReader(), old)] == [False]
    assert [r.keep_alive for r in parse_all(RequestReader(), old_keep)] == [True]


def test_expect_continue_is_offered_once_while_the_body_is_missing() -> None:
    reader = RequestReader()
    head = b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    assert parse_all(reader, head) == []
    assert reader.take_continue() and not reader.take_continue()
    assert parse_all(reader, b"o") == [] and not reader.take_continue()
    [request] = parse_all(reader, b"k")
    assert request.body == b"ok" and not reader.take_continue()
    [whole] = parse_all(reader, head + b"ok")  # the body came with the head: nothing to offer
    assert whole.body == b"ok" and not reader.take_continue()


def test_a_chunked_body_over_the_limit_is_413_before_it_is_all_read() -> None:
    reader = RequestReader()
    reader.feed(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    piece = b"%x\r\n" % (1024 * 1024) + b"x" * (1024 * 1024) + b"\r\n"
    with pytest.raises(HttpError) as caught:
        for _ in range(MAX_BODY // len(piece) + 2):
            parse_all(reader, piece)
    assert caught.value.status == 413


P = b"POST / HTTP/1.1\r\nHost: x\r\n"
CHUNKED = P + b"Transfer-Encoding: chunked\r\n"


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (P + b"no colon\r\n\r\n", 400),
        (P + b"Name : v\r\n\r\n", 400),
        (P + b"Content-Length: x\r\n\r\n", 400),
        (P + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (CHUNKED + b"Content-Length: 1\r\n\r\n", 400),
        (P + b"Transfer-Encoding: gzip\r\n\r\n", 400),
        (CHUNKED + b"\r\nzz\r\n", 400),
        (CHUNKED + b"\r\n0x2\r\nab\r\n", 400),
        (CHUNKED + b"\r\n2\r\nabcd", 400),
        (P + b"Content-Length: 999999999999\r\n\r\n", 413),
        (P + b"x: " + b"x" * (MAX_HEAD + 1) + b"\r\n\r\n", 431),
        (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 400),
    ],
)
def test_malformed_requests(data: bytes, status: int) -> None:
    with pytest.raises(HttpError) as caught:
        parse_all(RequestReader(), data)
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
