"""Request framing for the built-in server (protocol/http1_server.py), no sockets: the same
events whether bytes come at once or one at a time, and the refusals llhttp leaves to us."""

from __future__ import annotations

import pytest

from protocol.http1_server import END, Body, Event, Reject, Request, RequestParser, Upgrade


def _parser(**limits: int) -> RequestParser:
    return RequestParser(
        max_head_bytes=limits.get("max_head_bytes", 8192),
        max_headers=limits.get("max_headers", 20),
    )


def _events(data: bytes, *, bytewise: bool = False, **limits: int) -> list[object]:
    parser = _parser(**limits)
    for piece in [data[i : i + 1] for i in range(len(data))] if bytewise else [data]:
        parser.feed(piece)
    return [_describe(event) for event in parser.events]


def _describe(event: Event) -> object:
    if isinstance(event, Request):
        return ("request", event.method, event.target, event.keep_alive, event.content_length)
    if isinstance(event, Body):
        return event.data
    if isinstance(event, Reject):
        return ("reject", event.status)
    if isinstance(event, Upgrade):
        return ("upgrade", event.rest)
    assert event is END
    return "end"


def _joined(events: list[object]) -> list[object]:
    """Adjacent body parts joined (how many there are depends on the reads)."""
    out: list[object] = []
    for event in events:
        if isinstance(event, bytes) and out and isinstance(out[-1], bytes):
            out[-1] += event
        else:
            out.append(event)
    return out


VALID = [
    b"GET /a?b=c HTTP/1.1\r\nHost: t\r\n\r\n",
    b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\ntrailer: x\r\n\r\n",
    b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\nGET /2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    b"GET / HTTP/1.0\r\n\r\n",
]


@pytest.mark.parametrize("data", VALID)
def test_one_byte_at_a_time_gives_the_same_events(data: bytes) -> None:
    whole = _joined(_events(data))
    assert whole == _joined(_events(data, bytewise=True))
    assert whole[-1] == "end" and ("reject", 400) not in whole


def test_pipelined_requests_are_queued_in_order() -> None:
    assert _events(VALID[3]) == [
        ("request", "GET", b"/1", True, None),
        "end",
        ("request", "GET", b"/2", False, None),
        "end",
    ]


def test_chunked_body() -> None:
    events = _joined(_events(VALID[2]))
    assert events == [("request", "POST", b"/p", True, None), b"hello world", "end"]


@pytest.mark.parametrize("bytewise", [False, True])
def test_trailer_fields_are_dropped_but_bounded(bytewise: bool) -> None:
    parser = _parser()
    chunked = b"POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n"
    data = chunked + b"authorization: Bearer smuggled\r\n\r\n"
    for piece in [data[i : i + 1] for i in range(len(data))] if bytewise else [data]:
        parser.feed(piece)
    head = parser.events[0]
    assert isinstance(head, Request) and parser.events[-1] is END
    assert head.headers == [(b"host", b"t"), (b"transfer-encoding", b"chunked")]
    huge = chunked + b"x: " + b"a" * 9000 + b"\r\n\r\n"
    assert _events(huge, bytewise=bytewise)[-1] == ("reject", 431)


@pytest.mark.parametrize("bytewise", [False, True])
def test_websocket_upgrade_hands_over_the_bytes_after_the_head(bytewise: bool) -> None:
    head = (
        b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    parser = _parser()
    data = head + b"\x81\x00"
    for piece in [data[i : i + 1] for i in range(len(data))] if bytewise else [data]:
        parser.feed(piece)
    events = list(parser.events)
    assert isinstance(events[0], Request) and events[0].websocket
    assert events[1] is END
    rest = b"".join(e.rest for e in events[2:] if isinstance(e, Upgrade))
    if bytewise:
        # The parser is done at the upgrade; the caller hands later bytes to the WebSocket.
        assert parser.done and rest == b""
    else:
        assert rest == b"\x81\x00"


def test_another_upgrade_is_served_as_http() -> None:
    data = b"GET / HTTP/1.1\r\nHost: t\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
    events = _events(data + b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n")
    assert events == [
        ("request", "GET", b"/", False, None),
        "end",
        ("request", "GET", b"/next", True, None),
        "end",
    ]


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: t\r\n\r\n", 431),
        (b"GET / HTTP/1.1\r\nHost: t\r\nx: " + b"a" * 9000 + b"\r\n\r\n", 431),
        (b"GET / HTTP/1.1\r\nHost: t\r\n" + b"x: y\r\n" * 20 + b"\r\n", 431),
        (
            b"POST / HTTP/1.1\r\nHost: t\r\nUpgrade: h2c\r\nConnection: upgrade\r\n"
            b"Content-Length: 3\r\n\r\nabc",
            400,
        ),
    ],
)
@pytest.mark.parametrize("bytewise", [False, True])
def test_refusals_we_add_to_llhttp(data: bytes, status: int, bytewise: bool) -> None:
    events = _events(data, bytewise=bytewise)
    assert events[-1] == ("reject", status)


def test_a_header_line_that_never_ends_is_bounded() -> None:
    parser = _parser(max_head_bytes=1024)
    parser.feed(b"GET / HTTP/1.1\r\nHost: t\r\nx: ")
    for _ in range(200):
        parser.feed(b"a" * 1024)
        if parser.done:
            break
    assert parser.done and _describe(parser.events[-1]) == ("reject", 431)


def test_nothing_is_parsed_after_a_refusal() -> None:
    parser = _parser()
    parser.feed(b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n")
    parser.feed(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    assert [_describe(e) for e in parser.events] == [("reject", 400)]
