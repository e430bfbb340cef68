"""SSE framing and the incremental decoder: every line-end style, every split point, the bound."""

from __future__ import annotations

import pytest

from protocol.errors import UpstreamMalformed
from protocol.sse import DONE, KEEPALIVE, SSEDecoder, SSEEvent, data_event

SAMPLE = (
    b": connected\n"
    b"event: message_start\n"
    b'data: {"type":"message_start"}\n'
    b"\n"
    b"data: first line\n"
    b"data:second line\n"
    b"data:  two spaces\n"
    b"id: 7\n"
    b"retry: 1000\n"
    b"\n"
    b": keepalive\n"
    b"\n"
    b"event: lonely\n"
    b"\n"
    b"data\n"
    b"\n"
    b"data: h\xc3\xa9llo\n"
    b"\n"
    b"data: [DONE]\n"
    b"\n"
    b"data: never terminated\n"
)
EXPECTED = [
    SSEEvent("message_start", '{"type":"message_start"}'),
    SSEEvent(None, "first line\nsecond line\n two spaces"),
    SSEEvent(None, ""),
    SSEEvent(None, "héllo"),
    SSEEvent(None, "[DONE]"),
]
LINE_ENDS = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}


def decode_all(*parts: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for part in parts:
        events.extend(decoder.feed(part))
    return events


def test_frames_are_byte_exact() -> None:
    assert DONE == b"data: [DONE]\n\n"
    assert KEEPALIVE == b": keepalive\n\n"
    assert data_event(b'{"a":1}') == b'data: {"a":1}\n\n'


@pytest.mark.parametrize("line_end", LINE_ENDS.values(), ids=list(LINE_ENDS))
def test_every_split_point_gives_the_same_events(line_end: bytes) -> None:
    stream = SAMPLE.replace(b"\n", line_end)
    assert decode_all(stream) == EXPECTED
    for cut in range(len(stream) + 1):
        assert decode_all(stream[:cut], stream[cut:]) == EXPECTED, cut


@pytest.mark.parametrize("line_end", LINE_ENDS.values(), ids=list(LINE_ENDS))
def test_byte_by_byte(line_end: bytes) -> None:
    stream = SAMPLE.replace(b"\n", line_end)
    assert decode_all(*(stream[i : i + 1] for i in range(len(stream)))) == EXPECTED


def test_every_pair_of_split_points_of_a_crlf_stream() -> None:
    stream = b'event: a\r\ndata: x\r\n\r\ndata: {"b":2}\r\n\r\n'
    expected = [SSEEvent("a", "x"), SSEEvent(None, '{"b":2}')]
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            assert decode_all(stream[:i], stream[i:j], stream[j:]) == expected, (i, j)


def test_mixed_line_ends_in_one_stream() -> None:
    assert decode_all(b"data: a\r\rdata: b\n\ndata: c\r\n\n") == [
        SSEEvent(None, "a"),
        SSEEvent(None, "b"),
        SSEEvent(None, "c"),
    ]


def test_a_cr_then_an_lf_in_the_next_feed_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [SSEEvent(None, "a")]
    # ...but a bare `\r` then `\r` are two line ends: that blank line ends the next event
    assert decoder.feed(b"data: b\r") == []
    assert decoder.feed(b"\r") == [SSEEvent(None, "b")]


def test_an_unterminated_event_waits_for_its_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: partial\n") == []
    assert decoder.feed(b"data: more") == []
    assert decoder.feed(b"\n\n") == [SSEEvent(None, "partial\nmore")]


def test_the_event_type_resets_after_each_event() -> None:
    events = decode_all(b"event: ping\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\n")
    assert events == [SSEEvent("ping", "1"), SSEEvent(None, "2"), SSEEvent(None, "3")]


def test_a_leading_bom_is_dropped_even_split() -> None:
    stream = b"\xef\xbb\xbfdata: x\n\n"
    for cut in range(len(stream) + 1):
        assert decode_all(stream[:cut], stream[cut:]) == [SSEEvent(None, "x")], cut


def test_several_events_in_one_feed() -> None:
    frames = b"".join(data_event(str(i).encode()) for i in range(20))
    assert [event.data for event in decode_all(frames)] == [str(i) for i in range(20)]


def test_an_event_over_the_bound_raises() -> None:
    decoder = SSEDecoder(max_event_size=100)
    decoder.feed(b"data: " + b"x" * 60 + b"\n")
    with pytest.raises(UpstreamMalformed):
        decoder.feed(b"data: " + b"y" * 60 + b"\n")


def test_an_unterminated_line_over_the_bound_raises_before_its_end() -> None:
    decoder = SSEDecoder(max_event_size=100)
    decoder.feed(b"data: " + b"x" * 50)
    with pytest.raises(UpstreamMalformed):
        decoder.feed(b"x" * 50)


def test_a_huge_event_completed_in_one_feed_raises() -> None:
    with pytest.raises(UpstreamMalformed):
        SSEDecoder(max_event_size=100).feed(b"data: " + b"x" * 200 + b"\n\n")


def test_the_bound_is_per_event() -> None:
    decoder = SSEDecoder(max_event_size=100)
    for _ in range(50):
        assert decoder.feed(b"data: " + b"x" * 80 + b"\n\n") == [SSEEvent(None, "x" * 80)]
