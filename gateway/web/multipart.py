"""multipart/form-data request bodies, parsed as a stream.

`open_multipart` takes the request body as an async iterator of byte chunks (already capped at
the route's limit by the request layer) and yields its parts in order. A part's data is pulled
from the body only as the handler reads it, so memory holds one body chunk plus one part's
headers whatever the size of the upload. A file part is read as a stream (`async for data in
part`) or spooled (`await part.spool()`: memory, then an encrypted temporary file,
gateway/web/spool.py); a plain field is read whole and capped (`await part.text()`). A part
the handler leaves unread is skipped when it asks for the next one.

    async with open_multipart(content_type, body, limits) as form:
        async for part in form:
            if part.name == "purpose":
                purpose = await part.text()
            elif part.name == "file":
                upload = await part.spool()      # or: async for data in part: ...

Errors are `APIError`s: 415 `unsupported_media_type` when the body is not multipart/form-data;
400 `invalid_multipart` for a missing boundary or a malformed or truncated body; 400 for a
limit: `field_too_large` and `file_too_large` name the part in `param`, `too_many_parts` and
`part_headers_too_large` (the part's name is not known yet) give its position in the message.
An exception from the body iterator (the client left)
passes through as it is. Leaving the `async with`, however, closes every spooled file, and a
spooled file on disk is unlinked from its creation (and encrypted under a key that only this
process holds), so nothing outlives the request.

This module does no HTTP: it never calls `receive()`, enforces no total size (the request
layer's cap does), renders no response, and never treats a filename as a path.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from email.message import Message
from urllib.parse import unquote

from python_multipart.exceptions import FormParserError, MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from gateway.web.spool import SpooledFile
from protocol.errors import APIError, invalid_request


@dataclass(frozen=True)
class MultipartLimits:
    """What one form may hold; the body's total size is the request layer's limit."""

    max_parts: int = 64  # fields and files together; OpenAI-style forms carry about ten
    max_headers_per_part: int = 8
    max_header_bytes: int = 8 * 1024  # all of one part's header lines together
    max_field_bytes: int = 64 * 1024  # a field read with `Part.text()`
    spool_memory_bytes: int = 1024 * 1024  # a spooled part moves to disk past this


DEFAULT_LIMITS = MultipartLimits()
# RFC 2046 §5.1.1: 1 to 70 characters, the last one not a space.
_BOUNDARY = re.compile(rb"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")
_FILENAME_STAR = re.compile(r"""(?:^|;)\s*filename\*\s*=\s*([^';\s]*)'[^']*'([^;\s]*)""", re.I)
_FILENAME_CHARSETS = frozenset({"utf-8", "iso-8859-1"})  # RFC 8187 3.2.1
_PART, _DATA, _PART_END, _END = range(4)


def malformed(message: str) -> APIError:
    return invalid_request(message, code="invalid_multipart")


def multipart_boundary(content_type: str | bytes | None) -> bytes:
    """The boundary of a multipart/form-data Content-Type header value."""
    media_type, params = parse_options_header(content_type)
    if media_type != b"multipart/form-data":
        raise APIError(
            415,
            "The request body must be multipart/form-data.",
            type="invalid_request_error",
            code="unsupported_media_type",
        )
    repeated = repeated_parameter(content_type, extended=True)
    if repeated is not None:
        raise malformed(
            f"The multipart/form-data Content-Type gives the {repeated!r} parameter more than once."
        )
    boundary = params.get(b"boundary", b"")
    if not _BOUNDARY.fullmatch(boundary):
        raise malformed("The multipart/form-data Content-Type has no valid boundary parameter.")
    return boundary


def repeated_parameter(value: str | bytes | None, *, extended: bool) -> str | None:
    """The first parameter a header value (`type; a=1; b=2`) names twice, or None. The parser
    above keeps the last copy silently; another reader may keep the first, so a repeat is
    refused rather than guessed. With `extended`, RFC 2231 forms (`boundary*=`, `boundary*0=`)
    count as the plain name (python-multipart ignores them, a reader that honours them would
    not); without it (a part's Content-Disposition) only plain names count, since `filename`
    with `filename*` is the legitimate fallback pair. The split is the standard library's
    (`email.message`), the one python-multipart's own was copied from."""
    if not value:
        return None
    message = Message()
    message["v"] = value.decode("latin-1") if isinstance(value, bytes) else value
    seen: set[str] = set()
    params: list[tuple[str, object]] = list(message.get_params(failobj=[], header="v"))
    for name, param in params[1:]:
        if not extended and not isinstance(param, str):
            continue  # an RFC 2231 `name*` parameter
        if name in seen:
            return name
        seen.add(name)
    return None


@asynccontextmanager
async def open_multipart(
    content_type: str | bytes | None,
    chunks: AsyncIterator[bytes],
    limits: MultipartLimits = DEFAULT_LIMITS,
) -> AsyncIterator[Form]:
    """The form in `chunks`; its spooled files are closed (and so deleted) on the way out,
    whether the block finished, raised, or was cancelled. `chunks` is not closed: its owner
    does that."""
    form = Form(multipart_boundary(content_type), chunks, limits)
    try:
        yield form
    finally:
        form.close()


@dataclass(frozen=True)
class FormStatistics:
    parts: int
    body_bytes: int
    spools: int
    open_spools: int


class Form:
    """The parts of one body, in order. Iterating pulls the body as far as the next part's
    headers; a part left unread (or half read) is skipped first. After an error (or a
    cancellation) while reading, the form is not to be read further; an `APIError` from the
    body's content is raised again by every later read."""

    def __init__(
        self, boundary: bytes, chunks: AsyncIterator[bytes], limits: MultipartLimits
    ) -> None:
        self.limits = limits
        self._chunks = chunks
        try:
            self._parser = MultipartParser(
                boundary,
                {
                    "on_part_begin": self._on_part_begin,
                    "on_header_field": self._on_header_field,
                    "on_header_value": self._on_header_value,
                    "on_header_end": self._on_header_end,
                    "on_headers_finished": self._on_headers_finished,
                    "on_part_data": self._on_part_data,
                    "on_part_end": self._on_part_end,
                    "on_end": self._on_end,
                },
                max_header_count=limits.max_headers_per_part,
                max_header_size=limits.max_header_bytes,
            )
        except FormParserError as exc:
            raise malformed(f"Invalid multipart boundary: {exc}.") from None
        # Events of the last chunk fed; a chunk is fed only once they are all taken.
        self._events: deque[tuple[int, object]] = deque()
        self._field = bytearray()
        self._value = bytearray()
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._parts = 0
        self._body_bytes = 0
        self._current: Part | None = None
        self._finished = False
        self._spools: list[SpooledFile] = []
        self._error: APIError | None = None

    def __aiter__(self) -> Form:
        return self

    async def __anext__(self) -> Part:
        if self._current is not None:
            await self._current.skip()
        if self._finished:
            raise StopAsyncIteration
        kind, value = await self._next_event()
        if kind == _END:
            self._finished = True
            raise StopAsyncIteration
        assert kind == _PART and isinstance(value, Part), kind
        self._current = value
        return value

    def statistics(self) -> FormStatistics:
        return FormStatistics(
            parts=self._parts,
            body_bytes=self._body_bytes,
            spools=len(self._spools),
            open_spools=sum(not spool.closed for spool in self._spools),
        )

    def __repr__(self) -> str:
        s = self.statistics()
        return (
            f"<Form parts={s.parts} body_bytes={s.body_bytes} spools={s.spools} "
            f"open_spools={s.open_spools}>"
        )

    def close(self) -> None:
        """Close every spooled file. Synchronous on purpose, so it also runs when cancelled:
        closing an unlinked temporary file is one close(2)."""
        for spool in self._spools:
            spool.close()

    async def _next_event(self) -> tuple[int, object]:
        if self._error is not None:
            raise self._error  # the parser stopped mid-body: nothing after it is trustworthy
        while not self._events:
            try:
                self._feed(await anext(self._chunks, None))
            except APIError as exc:
                self._error = exc
                raise
        return self._events.popleft()

    def _feed(self, chunk: bytes | None) -> None:
        if chunk is None:
            raise malformed(
                "The multipart body ended before its closing boundary (truncated upload?)."
            )
        self._body_bytes += len(chunk)
        try:
            self._parser.write(chunk)
        except MultipartParseError as exc:
            if str(exc).startswith("Maximum header"):
                raise self._headers_too_large() from None
            raise malformed(f"Malformed multipart body: {exc}.") from None

    def _spool_for(self, part: Part) -> SpooledFile:
        spool = SpooledFile(
            part.name, part.filename, part.content_type, self.limits.spool_memory_bytes
        )
        self._spools.append(spool)
        return spool

    # The parser's callbacks: they run inside `parser.write` and only record what it found.

    def _on_part_begin(self) -> None:
        self._parts += 1
        if self._parts > self.limits.max_parts:
            raise invalid_request(
                f"The form has more than {self.limits.max_parts} parts.", code="too_many_parts"
            )
        self._headers = []
        self._header_bytes = 0

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._count_header_bytes(end - start)
        self._field += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._count_header_bytes(end - start)
        self._value += data[start:end]

    def _count_header_bytes(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > self.limits.max_header_bytes:
            raise self._headers_too_large()

    def _headers_too_large(self) -> APIError:
        return invalid_request(
            f"Part {self._parts} of the form has more than {self.limits.max_headers_per_part} "
            f"headers or more than {self.limits.max_header_bytes} bytes of them.",
            code="part_headers_too_large",
        )

    def _on_header_end(self) -> None:
        self._headers.append((bytes(self._field).lower(), bytes(self._value)))
        self._field.clear()
        self._value.clear()

    def _on_headers_finished(self) -> None:
        self._events.append((_PART, Part(self, tuple(self._headers))))

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        self._events.append((_DATA, data if start == 0 and end == len(data) else data[start:end]))

    def _on_part_end(self) -> None:
        self._events.append((_PART_END, None))

    def _on_end(self) -> None:
        self._events.append((_END, None))


class Part:
    """One part: its headers, and its data read once, in one of three ways (iterate, `text`,
    `spool`). `filename` is the client's label, never a path. Reading a part after the form
    has moved on to the next one is a programming error (RuntimeError)."""

    def __init__(self, form: Form, headers: tuple[tuple[bytes, bytes], ...]) -> None:
        self._form = form
        self.headers = headers  # (lower-case name, raw value), as sent
        self.size = 0  # bytes read so far
        self._started = False
        self._done = False
        disposition = self.header(b"content-disposition")
        kind, params = parse_options_header(disposition)
        if kind != b"form-data" or b"name" not in params:
            raise malformed(
                f"Part {form._parts} of the form has no 'Content-Disposition: form-data' "
                "header with a name."
            )
        repeated = repeated_parameter(disposition, extended=False)
        if repeated is not None:
            raise malformed(
                f"Part {form._parts} of the form gives the {repeated!r} parameter of its "
                "Content-Disposition more than once."
            )
        self.name = params[b"name"].decode("utf-8", "replace")
        self.filename = _filename(disposition, params.get(b"filename"))
        content_type = self.header(b"content-type")
        self.content_type = content_type.decode("latin-1") if content_type else None

    def header(self, name: bytes) -> bytes | None:
        """The first value of header `name` (lower case), or None."""
        return next((value for key, value in self.headers if key == name), None)

    def __repr__(self) -> str:
        return f"<Part name={self.name!r} filename={self.filename!r} size={self.size}>"

    def __aiter__(self) -> Part:
        self._started = True
        return self

    async def __anext__(self) -> bytes:
        """The next piece of data as the body delivers it (never empty)."""
        if self._form._current is not self:
            raise RuntimeError(f"{self!r} was read after the form moved past it")
        if self._done:
            raise StopAsyncIteration
        kind, value = await self._form._next_event()
        if kind == _PART_END:
            self._done = True
            raise StopAsyncIteration
        assert kind == _DATA and isinstance(value, bytes), kind
        self.size += len(value)
        return value

    async def skip(self) -> None:
        """Read and drop the rest of the data."""
        async for _ in self:
            pass

    async def text(self) -> str:
        """The whole value as UTF-8 text, at most `max_field_bytes` (400 `field_too_large`)."""
        self._claim()
        limit = self._form.limits.max_field_bytes
        value = bytearray()
        async for data in self:
            if len(value) + len(data) > limit:
                raise invalid_request(
                    f"Field '{self.name}' is longer than {limit} bytes.",
                    param=self.name,
                    code="field_too_large",
                )
            value += data
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise malformed(f"Field '{self.name}' is not valid UTF-8.") from None

    async def spool(self, *, max_bytes: int | None = None) -> SpooledFile:
        """The whole data, held (memory up to `spool_memory_bytes`, then an encrypted
        temporary file: gateway/web/spool.py) and closed when the form is; past `max_bytes`,
        400 `file_too_large`. Disk writes run on a worker thread; cancellation stops at the
        next chunk, and the form closes the file."""
        self._claim()
        spool = self._form._spool_for(self)
        async for data in self:
            if max_bytes is not None and spool.size + len(data) > max_bytes:
                raise invalid_request(
                    f"File '{self.name}' is larger than {max_bytes} bytes.",
                    param=self.name,
                    code="file_too_large",
                )
            await spool.write(data)
        await spool.finish()
        return spool

    def _claim(self) -> None:
        if self._started:
            raise RuntimeError(f"{self!r} has already been read")
        self._started = True


def _filename(disposition: bytes | None, plain: bytes | None) -> str | None:
    """RFC 7578 allows only `filename`, but some clients send the RFC 5987 `filename*` too
    (with `filename` as an ASCII fallback): the extended one wins when it decodes in one of
    the two charsets RFC 8187 allows (any codec Python knows would let `unicode_escape` or
    `utf-7` make lone surrogates, which no storage or header can encode)."""
    if disposition is not None and b"*" in disposition:
        star = _FILENAME_STAR.search(disposition.decode("latin-1"))
        if star is not None:
            charset = (star.group(1) or "utf-8").lower()
            if charset in _FILENAME_CHARSETS:
                try:
                    return unquote(star.group(2), encoding=charset, errors="strict")
                except UnicodeDecodeError:
                    pass
    # Browsers send UTF-8 inside the quotes; the header arrived as bytes.
    return plain.decode("utf-8", "replace") if plain is not None else None
