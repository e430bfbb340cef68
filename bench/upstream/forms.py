"""multipart/form-data request bodies for the simulated upstream's upload routes (audio
transcriptions, image edits and variations), parsed by python-multipart like the gateway's
own forms (gateway/web/multipart.py), but whole: the server holds every request body anyway
(its MAX_BODY). Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from python_multipart.exceptions import FormParserError, MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header


@dataclass(frozen=True, slots=True)
class FormPart:
    name: str
    filename: str | None  # None: a plain field
    data: bytes


def parse_form(content_type: str, body: bytes) -> list[FormPart] | None:
    """The parts of a multipart/form-data `body`, in order; None when the content type is not
    multipart/form-data with a boundary, or the body is malformed or truncated."""
    media_type, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if media_type != b"multipart/form-data" or not boundary:
        return None
    parts: list[FormPart] = []
    headers: dict[bytes, bytes] = {}
    field, value, data = bytearray(), bytearray(), bytearray()
    ended = False

    def on_header_end() -> None:
        headers[bytes(field).lower()] = bytes(value)
        field.clear()
        value.clear()

    def on_part_end() -> None:
        _, disposition = parse_options_header(headers.get(b"content-disposition", b""))
        name = disposition.get(b"name", b"").decode("utf-8", "replace")
        filename = disposition.get(b"filename")
        decoded = None if filename is None else filename.decode("utf-8", "replace")
        parts.append(FormPart(name, decoded, bytes(data)))
        headers.clear()
        data.clear()

    def on_end() -> None:
        nonlocal ended
        ended = True

    try:
        parser = MultipartParser(
            boundary,
            {
                "on_header_field": lambda d, s, e: field.extend(d[s:e]),
                "on_header_value": lambda d, s, e: value.extend(d[s:e]),
                "on_header_end": on_header_end,
                "on_part_data": lambda d, s, e: data.extend(d[s:e]),
                "on_part_end": on_part_end,
                "on_end": on_end,
            },
        )
        parser.write(body)
        parser.finalize()
    except (FormParserError, MultipartParseError):
        return None
    return parts if ended else None
