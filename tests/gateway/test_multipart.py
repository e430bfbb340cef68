"""gateway/web/multipart.py on hand-built bodies, most of them fed split at every byte."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import pytest

from gateway.web.multipart import (
    DEFAULT_LIMITS,
    MultipartLimits,
    open_multipart,
)
from protocol.errors import APIError

BOUNDARY = b"----b0undary"
CONTENT_TYPE = "multipart/form-data; boundary=" + BOUNDARY.decode()
Parsed = list[tuple[str, str | None, str | None, bytes]]


def part(headers: bytes, data: bytes) -> bytes:
    return b"--" + BOUNDARY + b"\r\n" + headers + b"\r\n\r\n" + data + b"\r\n"


def field(name: str, value: bytes) -> bytes:
    return part(b'Content-Disposition: form-data; name="%s"' % name.encode(), value)


def file(name: str, filename: str, data: bytes, content_type: bytes = b"text/plain") -> bytes:
    disposition = b'Content-Disposition: form-data; name="%s"; filename="%s"' % (
        name.encode(),
        filename.encode(),
    )
    return part(disposition + b"\r\nContent-Type: " + content_type, data)


CLOSE = b"--" + BOUNDARY + b"--\r\n"


class Body:
    """The body as an async iterator that counts what was pulled from it."""

    def __init__(self, pieces: Sequence[bytes], fail_after: int | None = None) -> None:
        self.pieces = list(pieces)
        self.pulled = 0
        self.fail_after = fail_after

    def __aiter__(self) -> Body:
        return self

    async def __anext__(self) -> bytes:
        if self.pulled == self.fail_after:
            raise ConnectionResetError("client went away")
        if self.pulled == len(self.pieces):
            raise StopAsyncIteration
        self.pulled += 1
        return self.pieces[self.pulled - 1]


def splits(body: bytes) -> Iterator[list[bytes]]:
    """The body whole, in two pieces cut at every byte, and byte by byte."""
    for i in range(len(body) + 1):
        yield [body[:i], body[i:]]
    yield [body[i : i + 1] for i in range(len(body))]


async def parse(pieces: Sequence[bytes], limits: MultipartLimits = DEFAULT_LIMITS) -> Parsed:
    parsed: Parsed = []
    async with open_multipart(CONTENT_TYPE, Body(pieces), limits) as form:
        async for p in form:
            data = b"".join([chunk async for chunk in p])
            assert len(data) == p.size
            parsed.append((p.name, p.filename, p.content_type, data))
    return parsed


async def error(pieces: Sequence[bytes], limits: MultipartLimits = DEFAULT_LIMITS) -> APIError:
    with pytest.raises(APIError) as caught:
        await parse(pieces, limits)
    return caught.value


TRICKY = (
    b"--" + BOUNDARY + b" not at a line start\r\n"
    b"\r\n--" + BOUNDARY[:-1] + b"\r\n"  # a cut boundary
    b"\r\n--" + BOUNDARY + b"X\r\n"  # the boundary followed by another character
    b"\r\n--" + BOUNDARY + b"-\r\n"  # half a closing delimiter
    b"\r\n\r\n\r\r\n\n--\r"
)


async def test_fields_and_files_mixed_at_every_split() -> None:
    body = (
        field("model", b"whisper-1")
        + file("file", "a.wav", TRICKY, b"audio/wav")
        + field("empty", b"")
        + file("crlf", "b.bin", b"\r\n", b"application/octet-stream")
        + field("lone", b"\r")
        + CLOSE
    )
    expected = [
        ("model", None, None, b"whisper-1"),
        ("file", "a.wav", "audio/wav", TRICKY),
        ("empty", None, None, b""),
        ("crlf", "b.bin", "application/octet-stream", b"\r\n"),
        ("lone", None, None, b"\r"),
    ]
    for pieces in splits(body):
        assert await parse(pieces) == expected, pieces


async def test_leading_crlf_epilogue_and_no_final_crlf() -> None:
    one = field("a", b"1")
    for body in (
        b"\r\n" + one + CLOSE,  # a blank line before the first boundary (some clients)
        one + CLOSE + b"epilogue: ignored\r\n--" + BOUNDARY + b"\r\n",
        one + CLOSE[:-2],  # the closing delimiter without its CRLF
    ):
        for pieces in splits(body):
            assert await parse(pieces) == [("a", None, None, b"1")]


async def test_empty_form() -> None:
    assert await parse([CLOSE]) == []


async def test_filenames_are_labels_decoded_as_sent() -> None:
    cases = {
        b'filename="a\\"b;c.txt"': 'a"b;c.txt',
        'filename="résumé ✓.pdf"'.encode(): "résumé ✓.pdf",
        b"filename=\"eur.txt\"; filename*=UTF-8''%E2%82%AC%20rates.txt": "€ rates.txt",
        b"filename*=utf-8''%C3%A9.txt": "é.txt",
        b"filename=\"ok.txt\"; filename*=UTF-8''%FF%FE.txt": "ok.txt",  # undecodable: fallback
        b'filename="../../etc/passwd"': "../../etc/passwd",  # a label: never used as a path
        b'filename=""': "",
    }
    for params, expected in cases.items():
        body = part(b'Content-Disposition: form-data; name="f"; ' + params, b"x") + CLOSE
        for pieces in ([body], [body[:40], body[40:]]):
            assert await parse(pieces) == [("f", expected, None, b"x")]


async def test_headers_are_kept_raw() -> None:
    body = part(b'content-disposition: form-data; name="f"\r\nX-Extra:  v', b"x") + CLOSE
    async with open_multipart(CONTENT_TYPE.encode(), Body([body])) as form:
        p = await anext(form)
        assert p.header(b"x-extra") == b"v"
        assert p.headers[0][0] == b"content-disposition"


async def test_missing_closing_boundary_is_a_400_at_every_split() -> None:
    body = field("a", b"1") + file("f", "x", b"data")
    for cut in (body, body[:-2], body[:-7], field("a", b"1")[:20]):
        for pieces in splits(cut):
            exc = await error(pieces)
            assert (exc.status, exc.code) == (400, "invalid_multipart")
            assert "closing boundary" in exc.message


@pytest.mark.parametrize(
    "body",
    [
        b"preamble text\r\n" + field("a", b"1") + CLOSE,
        b"--" + BOUNDARY + b"XYZ\r\n",
        b"--" + BOUNDARY + b"\r\nno colon here\r\n\r\nx\r\n" + CLOSE,
        b"--" + BOUNDARY + b"\r\nContent-Type: text/plain\r\n\r\nx\r\n" + CLOSE,
        part(b'Content-Disposition: attachment; name="a"', b"x") + CLOSE,
        part(b"Content-Disposition: form-data", b"x") + CLOSE,
    ],
    ids=["preamble", "bad-delimiter", "bad-header", "no-disposition", "not-form-data", "no-name"],
)
async def test_malformed_bodies(body: bytes) -> None:
    for pieces in ([body], [body[i : i + 1] for i in range(len(body))]):
        exc = await error(pieces)
        assert (exc.status, exc.code) == (400, "invalid_multipart"), exc.message


@pytest.mark.parametrize(
    ("content_type", "status", "code"),
    [
        ("application/json", 415, "unsupported_media_type"),
        (None, 415, "unsupported_media_type"),
        ("multipart/mixed; boundary=x", 415, "unsupported_media_type"),
        ("multipart/form-data", 400, "invalid_multipart"),
        ("multipart/form-data; boundary=", 400, "invalid_multipart"),
        ("multipart/form-data; boundary=" + "x" * 71, 400, "invalid_multipart"),
        ('multipart/form-data; boundary="a\rb"', 400, "invalid_multipart"),
    ],
)
async def test_content_type(content_type: str | None, status: int, code: str) -> None:
    with pytest.raises(APIError) as caught:
        async with open_multipart(content_type, Body([])):
            pass
    assert (caught.value.status, caught.value.code) == (status, code)


async def test_quoted_boundary_and_mixed_case_media_type() -> None:
    body = field("a", b"1") + CLOSE
    content_type = 'Multipart/Form-Data; charset=utf-8; boundary="' + BOUNDARY.decode() + '"'
    async with open_multipart(content_type, Body([body])) as form:
        assert [p.name async for p in form] == ["a"]


async def test_too_many_parts() -> None:
    limits = MultipartLimits(max_parts=3)
    ok = b"".join(field(f"f{i}", b"v") for i in range(3)) + CLOSE
    assert len(await parse([ok], limits)) == 3
    body = b"".join(field(f"f{i}", b"v") for i in range(4)) + CLOSE
    for pieces in ([body], [body[:50], body[50:]]):
        exc = await error(pieces, limits)
        assert (exc.status, exc.code) == (400, "too_many_parts")


@pytest.mark.parametrize(
    "headers",
    [
        b'Content-Disposition: form-data; name="a"\r\nX-Big: ' + b"v" * 2000,  # one long line
        b"X-Big: " + b"v" * 5000,  # a line with no end in sight
        b'Content-Disposition: form-data; name="a"' + b"\r\nX: 1" * 8,  # too many
        b'Content-Disposition: form-data; name="a"' + b"\r\nX: " + b"v" * 600 + b"\r\nY: "
        b"" + b"v" * 600,  # each line within the limit, all of them not
    ],
    ids=["long-line", "endless-line", "too-many", "too-much-in-all"],
)
async def test_part_headers_over_the_limits(headers: bytes) -> None:
    limits = MultipartLimits(max_headers_per_part=8, max_header_bytes=1024)
    body = field("first", b"1") + part(headers, b"x") + CLOSE
    for pieces in ([body], [body[i : i + 7] for i in range(0, len(body), 7)]):
        exc = await error(pieces, limits)
        assert (exc.status, exc.code) == (400, "part_headers_too_large"), exc.message
        assert "Part 2" in exc.message


async def test_unread_and_half_read_parts_are_skipped() -> None:
    body = file("a", "a.bin", b"A" * 1000) + file("b", "b.bin", b"B" * 1000) + field("c", b"C")
    body += CLOSE
    for pieces in ([body], [body[i : i + 10] for i in range(0, len(body), 10)]):
        async with open_multipart(CONTENT_TYPE, Body(pieces)) as form:
            a = await anext(form)  # not read at all
            b = await anext(form)
            assert (a.name, b.name) == ("a", "b")
            assert await anext(b) != b""  # read only a little
            c = await anext(form)
            assert await c.text() == "C"
            with pytest.raises(RuntimeError):
                await anext(a)
            with pytest.raises(StopAsyncIteration):
                await anext(form)
            with pytest.raises(StopAsyncIteration):
                await anext(form)


async def test_the_body_is_pulled_only_as_far_as_the_reader_asks() -> None:
    pieces = [field("a", b"1"), file("f", "f.bin", b"")[:-2], *[b"x" * 100] * 8, b"\r\n" + CLOSE]
    body = Body(pieces)
    async with open_multipart(CONTENT_TYPE, body) as form:
        a = await anext(form)
        assert body.pulled == 1
        assert await a.text() == "1"
        f = await anext(form)
        assert body.pulled == 2
        await anext(f)
        assert body.pulled == 3
        assert form.statistics().parts == 2
        assert sum([len(d) async for d in f]) == 700
        assert body.pulled == len(pieces)
    assert repr(form) == f"<Form parts=2 body_bytes={sum(map(len, pieces))} spools=0 open_spools=0>"


async def test_text_limits_and_encoding() -> None:
    limits = MultipartLimits(max_field_bytes=10)
    assert await parse([field("p", b"x" * 10) + CLOSE], limits) == [("p", None, None, b"x" * 10)]
    for value, code in ((b"x" * 11, "field_too_large"), (b"\xff\xfe", "invalid_multipart")):
        body = field("prompt", value) + CLOSE
        async with open_multipart(CONTENT_TYPE, Body([body[:30], body[30:]]), limits) as form:
            p = await anext(form)
            with pytest.raises(APIError) as caught:
                await p.text()
        assert (caught.value.status, caught.value.code) == (400, code)
        if code == "field_too_large":
            assert caught.value.param == "prompt"


async def test_a_part_is_read_once() -> None:
    async with open_multipart(CONTENT_TYPE, Body([field("a", b"1") + CLOSE])) as form:
        p = await anext(form)
        assert await p.text() == "1"
        with pytest.raises(RuntimeError):
            await p.text()
        with pytest.raises(RuntimeError):
            await p.spool()


async def test_spool_in_memory_and_on_disk() -> None:
    limits = MultipartLimits(spool_memory_bytes=1000)
    small, large = os.urandom(1000), os.urandom(300_000)
    body = file("s", "s.bin", small) + file("l", "l.bin", large) + CLOSE
    pieces = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    async with open_multipart(CONTENT_TYPE, Body(pieces), limits) as form:
        s = await (await anext(form)).spool()
        big = await (await anext(form)).spool()
        assert (s.size, s.on_disk, big.size, big.on_disk) == (1000, False, 300_000, True)
        assert (big.name, big.filename, big.content_type) == ("l", "l.bin", "text/plain")
        assert b"".join([d async for d in s.chunks()]) == small
        assert b"".join([d async for d in big.chunks(7000)]) == large
        assert b"".join([d async for d in big.chunks()]) == large  # again, from the start
        assert form.statistics().open_spools == 2
    assert s.closed and big.closed
    assert form.statistics().open_spools == 0


async def test_spool_max_bytes() -> None:
    body = file("image", "i.png", b"x" * 5000) + CLOSE
    async with open_multipart(CONTENT_TYPE, Body([body])) as form:
        p = await anext(form)
        with pytest.raises(APIError) as caught:
            await p.spool(max_bytes=4999)
    assert (caught.value.status, caught.value.code, caught.value.param) == (
        400,
        "file_too_large",
        "image",
    )
    assert form.statistics().open_spools == 0


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_client_leaving_mid_upload_frees_the_spooled_file() -> None:
    limits = MultipartLimits(spool_memory_bytes=1000)
    start = file("file", "big.bin", b"")[:-2]
    pieces = [field("purpose", b"batch") + start, *[os.urandom(8192)] * 50]
    fds = _open_fds()
    body = Body(pieces, fail_after=20)
    with pytest.raises(ConnectionResetError):
        async with open_multipart(CONTENT_TYPE, body, limits) as form:
            async for p in form:
                if p.name == "file":
                    spooled = await p.spool()
    assert body.pulled == 20
    assert (form.statistics().spools, form.statistics().open_spools) == (1, 0)
    assert _open_fds() == fds
    assert "spooled" not in locals()


async def test_an_error_is_raised_again_by_later_reads() -> None:
    body = field("a", b"1") + b"--" + BOUNDARY + b"\r\nbad header\r\n\r\n" + CLOSE
    cut = len(field("a", b"1")) - 2
    async with open_multipart(CONTENT_TYPE, Body([body[:cut], body[cut:]])) as form:
        a = await anext(form)
        with pytest.raises(APIError) as first:
            await a.text()  # its end is in the chunk that breaks
        with pytest.raises(APIError) as again:
            await anext(form)
    assert again.value is first.value
    assert first.value.code == "invalid_multipart"
