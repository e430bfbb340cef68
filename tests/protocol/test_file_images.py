"""`vision` uploads: PNG, JPEG and WEBP recognised by magic bytes, dimensions from the header
only, whatever the piece boundaries; hostile headers (huge segment lengths, endless fill bytes,
truncation) refused with bounded work."""

from __future__ import annotations

import io
import struct
import time
import zlib

import pytest
from PIL import Image

from protocol.errors import InvalidFile
from protocol.files import validator_for
from protocol.files.images import MAX_FILL, MAX_PIXELS, MAX_SEGMENTS, MAX_SIDE, ImageValidator


def _pil(fmt: str, size: tuple[int, int] = (3, 2), **options: object) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(out, fmt, **options)
    return out.getvalue()


def _validate(data: bytes, size: int | None = None) -> ImageValidator:
    validator = ImageValidator()
    step = size or max(len(data), 1)
    for i in range(0, len(data), step):
        validator.feed(data[i : i + step])
    validator.finish()
    return validator


def _error(data: bytes, size: int | None = None) -> InvalidFile:
    with pytest.raises(InvalidFile) as caught:
        _validate(data, size)
    return caught.value


def _png(width: int, height: int) -> bytes:
    """A PNG built by hand (PIL would allocate the pixels of a huge image)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0"))
        + chunk(b"IEND", b"")
    )


def _jpeg(width: int, height: int, before: bytes = b"") -> bytes:
    """SOI, optional segments, a baseline SOF0 frame header, then some scan and EOI."""
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + before + sof + b"\xff\xda\x00\x02" + b"\x00" * 10 + b"\xff\xd9"


def _webp_vp8x(width: int, height: int) -> bytes:
    body = b"VP8X" + struct.pack("<I", 10) + b"\0\0\0\0"
    body += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


# --- real images, any split ----------------------------------------------------------------

REAL = [
    ("png", _pil("PNG"), "image/png"),
    ("jpeg", _pil("JPEG"), "image/jpeg"),
    ("progressive_jpeg", _pil("JPEG", progressive=True), "image/jpeg"),
    ("jpeg_with_exif", _pil("JPEG", exif=b"Exif\0\0" + b"\0" * 60_000), "image/jpeg"),
    ("webp_lossy", _pil("WEBP"), "image/webp"),
    ("webp_lossless", _pil("WEBP", lossless=True), "image/webp"),
    ("webp_extended", _pil("WEBP", exif=b"Exif\0\0xx"), "image/webp"),
]


@pytest.mark.parametrize(("data", "media"), [(d, m) for _, d, m in REAL], ids=[n for n, *_ in REAL])
@pytest.mark.parametrize("size", [1, 5, None])
def test_real_images_are_recognised_with_their_dimensions(
    data: bytes, media: str, size: int | None
) -> None:
    validator = validator_for("vision")
    step = size or len(data)
    for i in range(0, len(data), step):
        validator.feed(data[i : i + step])
    assert validator.finish() == media
    assert isinstance(validator, ImageValidator)
    assert (validator.width, validator.height) == (3, 2)


def test_large_real_image_dimensions() -> None:
    validator = _validate(_pil("JPEG", (4000, 3000)), 65536)
    assert (validator.width, validator.height) == (4000, 3000)


# --- hostile headers -----------------------------------------------------------------------


def test_jpeg_segments_skipped_by_length_cost_no_memory_or_copy() -> None:
    # 300 maximal segments (~19 MB) before the frame: walked by their lengths, not buffered.
    segment = b"\xff\xe1\xff\xff" + b"\0" * 65533
    data = _jpeg(640, 480, segment * 300)
    validator = ImageValidator()
    started = time.perf_counter()
    for i in range(0, len(data), 65536):
        validator.feed(data[i : i + 65536])
        assert len(validator._buf) < 16
    assert validator.finish() == "image/jpeg"
    assert (validator.width, validator.height) == (640, 480)
    assert time.perf_counter() - started < 1


def test_jpeg_segment_length_beyond_the_file_is_truncation() -> None:
    data = b"\xff\xd8\xff\xe1\xff\xff" + b"\0" * 100
    assert _error(data).message == "The image is not valid: truncated before its dimensions."


def test_jpeg_endless_fill_bytes_are_refused_early() -> None:
    validator = ImageValidator()
    validator.feed(b"\xff\xd8")
    with pytest.raises(InvalidFile) as caught:
        for _ in range(1000):
            validator.feed(b"\xff" * 16)
    assert caught.value.code == "invalid_image"
    assert "fill bytes" in caught.value.message
    ok = _jpeg(10, 10).replace(b"\xff\xc0", b"\xff" * (MAX_FILL - 1) + b"\xff\xc0", 1)
    assert _validate(ok).width == 10


def test_jpeg_with_too_many_segments_is_refused() -> None:
    tiny = b"\xff\xfe\x00\x02"  # empty comment segments
    assert _validate(_jpeg(8, 8, tiny * (MAX_SEGMENTS - 1))).width == 8
    error = _error(_jpeg(8, 8, tiny * MAX_SEGMENTS), 4096)
    assert "more than 1,000 segments" in error.message


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"\xff\xd8\xff\xda\x00\x02", "marker 0xDA before its frame header"),
        (b"\xff\xd8\xff\xd9", "marker 0xD9 before its frame header"),
        (b"\xff\xd8\xff\xd8", "marker 0xD8 before its frame header"),
        (b"\xff\xd8\xff\x00", "marker 0x00 before its frame header"),
        (b"\xff\xd8\x12", "data where a marker was expected"),
        (b"\xff\xd8\xff\xe0\x00\x01", "segment length below 2"),
        (b"\xff\xd8\xff\xc0\x00\x07\x08\x00\x01\x00\x01", "frame header is too short"),
    ],
)
def test_malformed_jpeg_headers(data: bytes, what: str) -> None:
    error = _error(data + b"\0" * 20, 1)
    assert error.code == "invalid_image"
    assert what in error.message


def test_jpeg_restart_markers_before_the_frame_are_passed_over() -> None:
    assert _validate(_jpeg(5, 6, b"\xff\xd0\xff\x01")).height == 6


# --- formats and truncation ----------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"GIF89a" + b"\0" * 100,
        b"<svg xmlns='http://www.w3.org/2000/svg'/>",
        b"\x89PNX\r\n\x1a\n" + b"\0" * 40,
        b"RIFF\0\0\0\0WAVEfmt " + b"\0" * 40,
        b"x",
        b"BM" + b"\0" * 60,
    ],
)
def test_other_formats_are_unsupported(data: bytes) -> None:
    for size in (1, None):
        assert _error(data, size).code == "unsupported_image_format"


def test_an_empty_file_is_invalid() -> None:
    assert _error(b"").code == "invalid_image"


@pytest.mark.parametrize(("name", "data", "media"), REAL, ids=[n for n, *_ in REAL])
def test_images_truncated_in_the_header_are_invalid(name: str, data: bytes, media: str) -> None:
    header_end = {"png": 24, "webp_lossy": 30, "webp_lossless": 25, "webp_extended": 30}
    cut = header_end.get(name, data.find(b"\xff\xc0") + 8 if b"\xff\xc0" in data else 0)
    if not cut:
        cut = data.find(b"\xff\xc2") + 8
    ends = sorted({*range(2, min(cut, 64)), *range(2, cut, max(1, cut // 97)), cut - 1})
    for end in ends:
        error = _error(data[:end], 1 if end < 64 else None)
        assert error.code == "invalid_image", end
        assert "truncated" in error.message


def test_truncated_png_body_and_webp_body_are_invalid() -> None:
    png = _pil("PNG")
    assert "IEND" in _error(png[:-1]).message
    assert "IEND" in _error(png[:-12] + b"garbage after").message
    webp = _pil("WEBP")
    assert "RIFF size" in _error(webp[:-1]).message
    assert _validate(webp + b"trailing").format == "webp"  # more than RIFF says is tolerated


def test_png_must_start_with_ihdr() -> None:
    data = _png(4, 4).replace(b"IHDR", b"IHDX")
    assert "IHDR" in _error(data).message


def test_vp8_that_is_not_a_key_frame_is_invalid() -> None:
    data = bytearray(_pil("WEBP"))
    data[20] |= 1
    assert "key frame" in _error(bytes(data)).message


# --- limits --------------------------------------------------------------------------------

LIMIT_CASES = [
    (MAX_SIDE, MAX_PIXELS // MAX_SIDE, None),
    (MAX_SIDE + 1, 1, "image_too_large"),
    (1, MAX_SIDE + 1, "image_too_large"),
    (10_000, 10_000, None),  # exactly MAX_PIXELS
    (10_000, 10_001, "image_too_large"),
    (1, 1, None),
    (0, 5, "invalid_image"),
    (5, 0, "invalid_image"),
    (2**31 - 1, 2**31 - 1, "image_too_large"),
    (2**24, 2**24, "image_too_large"),
    (0xFFFF, 0xFFFF, "image_too_large"),
]


@pytest.mark.parametrize(("width", "height", "code"), LIMIT_CASES)
def test_png_limits(width: int, height: int, code: str | None) -> None:
    _check_limit(_png(width, height), width, height, code)


@pytest.mark.parametrize(
    ("width", "height", "code"), [c for c in LIMIT_CASES if max(c[:2]) <= 0xFFFF]
)  # JPEG sides are 16-bit
def test_jpeg_limits(width: int, height: int, code: str | None) -> None:
    _check_limit(_jpeg(width, height), width, height, code)


@pytest.mark.parametrize(
    ("width", "height", "code"), [c for c in LIMIT_CASES if 1 <= min(c[:2]) <= max(c[:2]) <= 2**24]
)  # VP8X stores sides as 24-bit values minus one
def test_webp_limits(width: int, height: int, code: str | None) -> None:
    _check_limit(_webp_vp8x(width, height), width, height, code)


def _check_limit(data: bytes, width: int, height: int, code: str | None) -> None:
    if code is None:
        validator = _validate(data, 3)
        assert (validator.width, validator.height) == (width, height)
        return
    validator = ImageValidator()
    with pytest.raises(InvalidFile) as caught:
        validator.feed(data)  # refused in feed(), as soon as the header is read
    assert caught.value.code == code
    assert caught.value.api_error().status == 400
    with pytest.raises(InvalidFile):
        validator.finish()


def test_feed_after_finish_is_a_bug() -> None:
    validator = _validate(_png(2, 2))
    with pytest.raises(RuntimeError):
        validator.feed(b"x")
