"""Streaming JSONL framing: split pieces of any size into lines, bounded, and check each.

A subclass implements `_check(line, number)` for one non-blank line (a memoryview without its
`\n`; a trailing `\r` is JSON whitespace and left to the decoder) and `_check_end()`.

Rules (docs/decisions.md, "File validation"):

- A line longer than `MAX_LINE_BYTES` is an error as soon as the limit is passed; it is never
  buffered beyond it. Memory is one carried partial line plus the caller's piece.
- Every line must be UTF-8 (msgspec skips unknown fields without checking their bytes, so the
  line is decoded once more here).
- Blank lines (empty or whitespace only) are skipped but counted, so line numbers match an
  editor's; a file with no non-blank line is an error. A UTF-8 byte order mark is refused with a
  message saying so.
"""

from __future__ import annotations

import codecs
from typing import Any

import msgspec

from protocol.errors import InvalidFile

MAX_LINE_BYTES = 8 * 1024 * 1024
FAST_MIN_LINES = 64  # complete lines in a piece from which they are decoded in one call
_BOM = b"\xef\xbb\xbf"
_BLANK = b" \t\r\n"
CODE = "invalid_jsonl"


def line_error(number: int, what: str) -> InvalidFile:
    return InvalidFile(CODE, f"line {number}: {what}")


def quote(value: str, limit: int = 40) -> str:
    """A client's string in a message, shortened: the error stays small whatever it sent."""
    shown = value if len(value) <= limit else value[:limit] + "…"
    return repr(shown)


def decode_failure(exc: Exception, line: memoryview, number: int) -> InvalidFile | None:
    """The error for a line msgspec refused, or None when the line is blank (to be skipped)."""
    raw = bytes(line)
    if not raw.strip(_BLANK):
        return None
    if number == 1 and raw.startswith(_BOM):
        return line_error(
            number, "the file starts with a UTF-8 byte order mark (BOM); save it without one"
        )
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return line_error(number, "not valid UTF-8")
    if isinstance(exc, RecursionError):
        return line_error(number, "nested too deeply")
    if isinstance(exc, msgspec.ValidationError):
        return line_error(number, _validation_text(str(exc)))
    return line_error(number, "not valid JSON")


def _validation_text(text: str) -> str:
    """msgspec's "Expected `str`, got `int` - at `$.messages[0].role`" as "messages[0].role: …"."""
    marker = " - at `$"
    cut = text.rfind(marker)
    path = text[cut + len(marker) : -1].lstrip(".") if cut >= 0 else ""
    body = _lower_first(text[:cut] if cut >= 0 else text)
    if body.startswith("object missing required field `"):
        field = body.split("`")[1]
        return f"{path}.{field} is missing" if path else f"{field} is missing"
    return f"{path}: {body}" if path else body


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


class JsonlValidator:
    """Feed pieces, then `finish()`; raises `InvalidFile` at the first bad line.

    Two paths give the same verdict. The fast one takes the complete lines of a piece at once:
    the piece is checked as UTF-8 by an incremental decoder (which carries a character split
    across pieces), and when it holds at least `FAST_MIN_LINES` complete lines they are decoded
    by one `decode_lines` call if every line starts with `{` and ends with `}` (LF or CRLF) —
    then no object can span lines, and as many objects as lines means exactly one a line.
    Anything else (fewer lines, a failure, a blank line, a decoding error) runs the line-by-line
    path over the same lines, which finds and names the first bad one. A subclass
    gives the typed `decoder`, `_example(obj, number)` (raise `line_error`), and `_accept(objs)`
    (True when all pass, committing any state only then).
    """

    media_type = "application/jsonl"
    decoder: msgspec.json.Decoder[Any]

    def __init__(self) -> None:
        self._carry = bytearray()
        self._line = 0  # number of the last line completed
        self._examples = 0
        self._failed: InvalidFile | None = None
        self._finished = False
        self._utf8: codecs.IncrementalDecoder | None = codecs.getincrementaldecoder("utf-8")()

    def feed(self, piece: bytes | bytearray | memoryview) -> None:
        if self._failed is not None:
            raise self._failed
        if self._finished:
            raise RuntimeError("feed() after finish()")
        try:
            self._feed(piece if isinstance(piece, bytes) else bytes(piece))
        except InvalidFile as exc:
            self._failed = exc
            raise

    def finish(self) -> str:
        """Check the last line (no final newline needed); returns the media type to store."""
        if self._failed is not None:
            raise self._failed
        self._finished = True
        try:
            if self._utf8 is not None:
                try:
                    self._utf8.decode(b"", final=True)
                except UnicodeDecodeError:
                    self._utf8 = None  # the file ends inside a character
            if self._carry:
                self._complete(memoryview(self._carry), self._utf8 is None)
                self._carry.clear()
            if self._examples == 0:
                raise InvalidFile(CODE, "the file has no lines; expected one JSON object a line")
            self._check_end()
        except InvalidFile as exc:
            self._failed = exc
            raise
        return self.media_type

    def _feed(self, data: bytes) -> None:
        if self._utf8 is not None:
            try:
                self._utf8.decode(data)
            except UnicodeDecodeError:
                self._utf8 = None  # from here on each line is checked on its own
        per_line = self._utf8 is None
        piece = memoryview(data)
        start = 0
        if self._carry:
            nl = data.find(b"\n")
            if nl < 0:
                self._grow(piece)
                return
            self._grow(piece[:nl])
            self._complete(memoryview(self._carry), per_line)
            self._carry.clear()
            start = nl + 1
        last = data.rfind(b"\n") + 1
        if last > start:
            if per_line or not self._fast(data, start, last):
                self._slow(data, start, last, per_line)
        if last < len(data):
            self._grow(piece[max(last, start) :])

    def _fast(self, data: bytes, start: int, end: int) -> bool:
        """All complete lines of a piece at once; False (nothing done) if any doubt.

        Only worth it for many short lines (one call instead of one per line); for long lines
        the per-line path is as fast and needs no structural check.
        """
        lines = data.count(b"\n", start, end)
        if lines < FAST_MIN_LINES or end - start > MAX_LINE_BYTES or data[start] != 0x7B:
            return False
        if data[end - 2] == 0x7D:  # "}\n"
            boundaries = data.count(b"}\n{", start, end)
        elif data[end - 3 : end - 1] == b"}\r":
            boundaries = data.count(b"}\r\n{", start, end)
        else:
            return False
        if boundaries != lines - 1:
            return False
        try:
            objs = self.decoder.decode_lines(memoryview(data)[start:end])
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return False
        if len(objs) != lines or not self._accept(objs):
            return False
        self._line += lines
        self._examples += lines
        return True

    def _slow(self, data: bytes, start: int, end: int, per_line: bool) -> None:
        piece = memoryview(data)
        while start < end:
            nl = data.find(b"\n", start, end)
            if nl - start > MAX_LINE_BYTES:
                raise self._too_long(self._line + 1)
            self._complete(piece[start:nl], per_line)
            start = nl + 1

    def _grow(self, part: memoryview) -> None:
        if len(self._carry) + len(part) > MAX_LINE_BYTES:
            raise self._too_long(self._line + 1)
        self._carry += part

    def _too_long(self, number: int) -> InvalidFile:
        return line_error(number, f"longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB")

    def _complete(self, line: memoryview, check_utf8: bool) -> None:
        self._line += 1
        number = self._line
        try:
            obj = self.decoder.decode(line)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
            failure = decode_failure(exc, line, number)
            if failure is None:
                return  # a blank line
            raise failure from None
        if check_utf8:
            utf8(line, number)
        self._example(obj, number)
        self._examples += 1

    def _example(self, obj: Any, number: int) -> None:
        raise NotImplementedError

    def _accept(self, objs: list[Any]) -> bool:
        raise NotImplementedError

    def _check_end(self) -> None:
        """Checks that need the whole file (none by default)."""


def utf8(line: memoryview, number: int) -> None:
    """Every byte of the line must be UTF-8, including the ones the decoder skipped over."""
    try:
        str(line, "utf-8")
    except UnicodeDecodeError:
        raise line_error(number, "not valid UTF-8") from None
