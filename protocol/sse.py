"""Server-Sent Events in both directions: frames the gateway sends, and an incremental decoder for
the streams upstreams send (the WHATWG `text/event-stream` parsing rules).

The decoder is fed whatever byte chunks the network delivers and returns complete events only; it
does no I/O and holds at most one event (bounded by `max_event_size`) in memory.
"""

from __future__ import annotations

import msgspec

from protocol.errors import UpstreamMalformed

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keepalive\n\n"
DEFAULT_MAX_EVENT_SIZE = 1 << 20

_BOM = b"\xef\xbb\xbf"


def data_event(payload: bytes) -> bytes:
    """One `data:` frame; `payload` must hold no line break (compact JSON never does)."""
    return b"data: " + payload + b"\n\n"


class SSEEvent(msgspec.Struct, frozen=True):
    event: str | None
    data: str


class SSEDecoder:
    """Incremental `text/event-stream` decoder.

    Lines end in `\\n`, `\\r\\n` or `\\r` (a `\\r\\n` split across two feeds counts once); `data:`
    lines of one event are joined with `\\n`; comment lines and `id:` / `retry:` are ignored; an
    event is emitted at its terminating blank line only, so a trailing unterminated event never is.
    """

    __slots__ = ("_data", "_event", "_max", "_pending", "_size", "_skip_lf", "_started")

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        self._max = max_event_size
        self._pending = b""  # the incomplete last line, line ends already normalized away
        self._data: list[bytes] = []
        self._event: str | None = None
        self._size = 0  # bytes of the current event's complete lines
        self._skip_lf = False  # the previous feed ended in `\r`: a leading `\n` is its tail
        self._started = False

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Consume `data`; return the events it completes. UpstreamMalformed past the bound."""
        if not self._started:
            data = self._pending + data
            self._pending = b""
            if len(data) < len(_BOM) and _BOM.startswith(data):
                self._pending = data
                return []
            self._started = True
            if data.startswith(_BOM):
                data = data[len(_BOM) :]
        if not data:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        if b"\r" in data:
            self._skip_lf = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self._pending:
            data = self._pending + data
        lines = data.split(b"\n")
        self._pending = lines.pop()
        events: list[SSEEvent] = []
        size, limit, data_lines = self._size, self._max, self._data
        for line in lines:
            if line:
                size += len(line) + 1
                if size > limit:
                    raise UpstreamMalformed(f"an event exceeds {limit} bytes")
                if line.startswith(b"data: "):  # the usual line, spelled the usual way
                    data_lines.append(line[6:])
                    continue
                if line[0] == 0x3A:  # b":" starts a comment
                    continue
                field, colon, value = line.partition(b":")
                if colon and value[:1] == b" ":
                    value = value[1:]
                if field == b"data":
                    data_lines.append(value)
                elif field == b"event":
                    self._event = value.decode("utf-8", "replace") or None
                continue
            if data_lines:
                text = b"\n".join(data_lines).decode("utf-8", "replace")
                events.append(SSEEvent(self._event, text))
                data_lines.clear()
            self._event = None
            size = 0
        self._size = size
        if size + len(self._pending) > limit:
            raise UpstreamMalformed(f"an event exceeds {limit} bytes")
        return events

    def __repr__(self) -> str:
        return f"SSEDecoder(buffered={self._size + len(self._pending)}, lines={len(self._data)})"
