"""The multipart form of an edit or variation as sent upstream: built by the gateway from the
checked fields (never the client's form relayed), model rewritten, `response_format` always
b64_json. No I/O."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FilePart:
    name: str
    data: bytes
    filename: str = "image.png"
    content_type: str = "image/png"


class UpstreamForm:
    def __init__(self, fields: Sequence[tuple[str, str]], files: Sequence[FilePart]) -> None:
        self.boundary = "gateway-" + os.urandom(16).hex()
        self._fields = fields
        self._files = files

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def pieces(self) -> Iterator[bytes]:
        """The body, a part at a time (a file's bytes are one piece, not copied)."""
        dash = f"--{self.boundary}\r\n".encode()
        for name, value in self._fields:
            yield dash
            yield f'Content-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            yield value.encode() + b"\r\n"
        for part in self._files:
            yield dash
            yield (
                f'Content-Disposition: form-data; name="{part.name}";'
                f' filename="{part.filename}"\r\nContent-Type: {part.content_type}\r\n\r\n'
            ).encode()
            yield part.data
            yield b"\r\n"
        yield f"--{self.boundary}--\r\n".encode()
