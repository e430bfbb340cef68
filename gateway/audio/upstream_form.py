"""The multipart form sent to the provider for a transcription or translation, built as it is
sent: the fields first (`model` rewritten to the provider's name), then the file's data as the
client's form delivers it, then any fields the client sent after its file."""

from __future__ import annotations

import secrets

_FILE_TYPES = {
    "mp3": "audio/mpeg",
    "mpga": "audio/mpeg",
    "mpeg": "audio/mpeg",
    "mp4": "audio/mp4",
    "m4a": "audio/mp4",
    "wav": "audio/wav",
    "webm": "audio/webm",
}


class UpstreamForm:
    """Encodes parts; the boundary is random, so no file can contain it by accident."""

    def __init__(self) -> None:
        self.boundary = "gw-" + secrets.token_hex(16)
        self._dash = b"--" + self.boundary.encode()

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def field(self, name: str, value: str) -> bytes:
        return (
            self._dash
            + f'\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            + value.encode()
            + b"\r\n"
        )

    def file_head(self, extension: str) -> bytes:
        """The file part's headers. The provider sees `audio.<extension>`, never the client's
        filename (the extension is what providers read the format from)."""
        content_type = _FILE_TYPES.get(extension, "application/octet-stream")
        return (
            self._dash
            + b'\r\nContent-Disposition: form-data; name="file"; '
            + f'filename="audio.{extension}"\r\nContent-Type: {content_type}\r\n\r\n'.encode()
        )

    @staticmethod
    def file_end() -> bytes:
        return b"\r\n"

    def end(self) -> bytes:
        return self._dash + b"--\r\n"
