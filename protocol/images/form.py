"""The multipart form of an edit or variation as sent upstream: built by the gateway from the
checked fields (never the client's form relayed), model rewritten, `response_format` always
b64_json. No I/O."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from protocol.multipart_form import FormEncoder


@dataclass(frozen=True)
class FilePart:
    name: str
    data: bytes
    filename: str = "image.png"
    content_type: str = "image/png"


class UpstreamForm:
    def __init__(self, fields: Sequence[tuple[str, str]], files: Sequence[FilePart]) -> None:
        self._encoder = FormEncoder()
        self._fields = fields
        self._files = files

    @property
    def boundary(self) -> str:
        return self._encoder.boundary

    @property
    def content_type(self) -> str:
        return self._encoder.content_type

    def pieces(self) -> Iterator[bytes]:
        """The body, a part at a time (a file's bytes are one piece, not copied)."""
        encoder = self._encoder
        for name, value in self._fields:
            yield encoder.field(name, value)
        for part in self._files:
            yield encoder.file_head(part.name, part.filename, part.content_type)
            yield part.data
            yield encoder.file_end()
        yield encoder.end()
