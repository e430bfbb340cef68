"""`vision` files: PNG, JPEG or WEBP by magic bytes, dimensions read from the header only.

Pixels are never decoded. The header is parsed by a generator that asks the driver for a few
bytes at a time (`_Read`) or to pass over a run of bytes uncopied (`_Skip`), so a header split
across pieces at any byte parses the same, and memory is a few dozen bytes whatever the input.

    PNG   signature, then the IHDR chunk (must come first, length 13); the file must end with
          the IEND chunk (a cheap check for a truncated upload).
    JPEG  SOI, then markers walked by their segment lengths up to the first SOFn frame
          header; at most `MAX_FILL` 0xFF fill bytes before a marker and `MAX_SEGMENTS`
          segments before the frame (each bounds CPU on hostile input); SOS, EOI or a second
          SOI before a frame header is invalid; a DNL height (0) is refused. What follows the
          frame header (entropy-coded data, EOI, trailers such as motion photos) is not read.
    WEBP  RIFF/WEBP with its first chunk VP8 (lossy key frame), VP8L (lossless) or VP8X
          (extended: canvas size); the RIFF size must not exceed the bytes received.

Limits: each side 1..`MAX_SIDE` px and at most `MAX_PIXELS` in all, else `image_too_large`.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from protocol.errors import InvalidFile

MAX_SIDE = 16_384
MAX_PIXELS = 100_000_000
MAX_FILL = 64
MAX_SEGMENTS = 1_000

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # not DHT, JPG, DAC
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})


@dataclass
class _Read:
    n: int


@dataclass
class _Skip:
    n: int


@dataclass(frozen=True)
class _Header:
    media_type: str
    width: int
    height: int


_Parser = Generator[_Read | _Skip, bytes, _Header]


def _invalid(what: str) -> InvalidFile:
    return InvalidFile("invalid_image", f"The image is not valid: {what}.")


class ImageValidator:
    """Feed pieces, then `finish()`; raises `InvalidFile` at the first problem."""

    def __init__(self) -> None:
        self.format: str | None = None  # png, jpeg, webp once the magic bytes are seen
        self._riff_size: int | None = None
        self._parser = self._parse()
        self._want: _Read | _Skip = next(self._parser)
        self._buf = bytearray()
        self._header: _Header | None = None
        self._total = 0
        self._head = b""  # the first bytes, to tell a truncated magic from another format
        self._tail = b""
        self._failed: InvalidFile | None = None
        self._finished = False

    @property
    def width(self) -> int | None:
        return self._header.width if self._header else None

    @property
    def height(self) -> int | None:
        return self._header.height if self._header else None

    def feed(self, piece: bytes | bytearray | memoryview) -> None:
        if self._failed is not None:
            raise self._failed
        if self._finished:
            raise RuntimeError("feed() after finish()")
        data = piece if isinstance(piece, bytes) else bytes(piece)
        self._total += len(data)
        if len(self._head) < 12:
            self._head = (self._head + data[:12])[:12]
        self._tail = (self._tail + data[-len(PNG_IEND) :])[-len(PNG_IEND) :]
        if self._header is None:
            try:
                self._advance(memoryview(data))
            except InvalidFile as exc:
                self._failed = exc
                raise

    def finish(self) -> str:
        """The media type (image/png, image/jpeg, image/webp) of a valid image."""
        if self._failed is not None:
            raise self._failed
        self._finished = True
        try:
            header = self._check_end()
        except InvalidFile as exc:
            self._failed = exc
            raise
        return header.media_type

    def _check_end(self) -> _Header:
        if self._total == 0:
            raise InvalidFile("invalid_image", "The image is empty.")
        if self.format is None:
            if _magic_prefix(self._head):
                raise _invalid("truncated before its dimensions")
            raise _unsupported()
        if self._header is None:
            raise _invalid("truncated before its dimensions")
        if self.format == "png" and self._tail != PNG_IEND:
            raise _invalid("truncated (a PNG must end with its IEND chunk)")
        if self._riff_size is not None and self._total < self._riff_size + 8:
            raise _invalid("truncated (shorter than its RIFF size)")
        return self._header

    def _advance(self, data: memoryview) -> None:
        pos, end = 0, len(data)
        while self._header is None:
            want = self._want
            if isinstance(want, _Skip):
                take = min(want.n, end - pos)
                want.n -= take
                pos += take
                if want.n:
                    return
                self._send(b"")
            else:
                take = min(want.n - len(self._buf), end - pos)
                self._buf += data[pos : pos + take]
                pos += take
                if len(self._buf) < want.n:
                    return
                chunk = bytes(self._buf)
                self._buf.clear()
                self._send(chunk)

    def _send(self, value: bytes) -> None:
        try:
            self._want = self._parser.send(value)
        except StopIteration as stop:
            header: _Header = stop.value
            _check_limits(header)
            self._header = header

    def _parse(self) -> _Parser:
        head = yield _Read(2)
        if head == b"\xff\xd8":
            self.format = "jpeg"
            return (yield from _jpeg())
        if head == PNG_SIGNATURE[:2]:
            rest = yield _Read(6)
            if head + rest != PNG_SIGNATURE:
                raise _unsupported()
            self.format = "png"
            return (yield from _png())
        if head == b"RI":
            rest = yield _Read(10)
            if rest[:2] != b"FF" or rest[6:10] != b"WEBP":
                raise _unsupported()
            self.format = "webp"
            self._riff_size = int.from_bytes(rest[2:6], "little")
            return (yield from _webp())
        raise _unsupported()


def _unsupported() -> InvalidFile:
    return InvalidFile(
        "unsupported_image_format", "The image must be PNG, JPEG or WEBP (by its content)."
    )


def _magic_prefix(head: bytes) -> bool:
    """True if `head` (shorter than any magic) could be the start of a supported image."""
    riff = b"RIFF????WEBP"
    if all(a == b or b == ord("?") for a, b in zip(head, riff, strict=False)):
        return len(head) < len(riff)
    return PNG_SIGNATURE.startswith(head) or b"\xff\xd8".startswith(head)


def _check_limits(header: _Header) -> None:
    width, height = header.width, header.height
    if width < 1 or height < 1:
        raise _invalid(f"its dimensions are {width}x{height}")
    if width > MAX_SIDE or height > MAX_SIDE or width * height > MAX_PIXELS:
        raise InvalidFile(
            "image_too_large",
            f"The image is {width}x{height} px; each side may be at most {MAX_SIDE:,} px "
            f"and the whole at most {MAX_PIXELS:,} px.",
        )


def _png() -> _Parser:
    chunk = yield _Read(8)
    if chunk != b"\x00\x00\x00\x0dIHDR":
        raise _invalid("the PNG does not start with its IHDR chunk")
    ihdr = yield _Read(13)
    width = int.from_bytes(ihdr[0:4], "big")
    height = int.from_bytes(ihdr[4:8], "big")
    return _Header("image/png", width, height)


def _jpeg() -> _Parser:
    for _ in range(MAX_SEGMENTS):
        byte = (yield _Read(1))[0]
        if byte != 0xFF:
            raise _invalid("the JPEG has data where a marker was expected")
        fills = 0
        while byte == 0xFF:
            fills += 1
            if fills > MAX_FILL:
                raise _invalid(f"the JPEG has more than {MAX_FILL} fill bytes before a marker")
            byte = (yield _Read(1))[0]
        marker = byte
        if marker in _JPEG_SOF:
            frame = yield _Read(7)  # length, precision, height, width
            if int.from_bytes(frame[0:2], "big") < 8:
                raise _invalid("the JPEG frame header is too short")
            height = int.from_bytes(frame[3:5], "big")
            width = int.from_bytes(frame[5:7], "big")
            return _Header("image/jpeg", width, height)
        if marker in _JPEG_STANDALONE:
            continue
        if marker in (0x00, 0xD8, 0xD9, 0xDA):
            raise _invalid(f"the JPEG has marker 0x{marker:02X} before its frame header")
        length = int.from_bytes((yield _Read(2)), "big")
        if length < 2:
            raise _invalid("the JPEG has a segment length below 2")
        if length > 2:
            yield _Skip(length - 2)
    raise _invalid(f"the JPEG has more than {MAX_SEGMENTS:,} segments before its frame header")


def _webp() -> _Parser:
    chunk = yield _Read(8)
    fourcc = chunk[:4]
    if fourcc == b"VP8 ":
        frame = yield _Read(10)
        if frame[0] & 1 or frame[3:6] != b"\x9d\x01\x2a":
            raise _invalid("the WEBP VP8 frame is not a key frame")
        width = int.from_bytes(frame[6:8], "little") & 0x3FFF
        height = int.from_bytes(frame[8:10], "little") & 0x3FFF
        return _Header("image/webp", width, height)
    if fourcc == b"VP8L":
        frame = yield _Read(5)
        if frame[0] != 0x2F:
            raise _invalid("the WEBP VP8L signature is wrong")
        bits = int.from_bytes(frame[1:5], "little")
        return _Header("image/webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if fourcc == b"VP8X":
        frame = yield _Read(10)
        width = int.from_bytes(frame[4:7], "little") + 1
        height = int.from_bytes(frame[7:10], "little") + 1
        return _Header("image/webp", width, height)
    raise _invalid("the WEBP does not start with a VP8, VP8L or VP8X chunk")
