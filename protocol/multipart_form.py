"""A multipart/form-data body for a provider, encoded a part at a time so a file can stream
through (python-multipart only parses; httpx's encoder is private and wants the whole body).
The boundary is random, so no content contains it by accident. Names, filenames and content
types are the gateway's own; one that would need quoting is refused rather than escaped.
No I/O."""

from __future__ import annotations

import secrets

_NEEDS_QUOTING = frozenset('"\r\n')


def _plain(token: str) -> str:
    if _NEEDS_QUOTING.intersection(token):
        raise ValueError(f"form token needs quoting: {token[:40]!r}")
    return token


class FormEncoder:
    def __init__(self) -> None:
        self.boundary = "gateway-" + secrets.token_hex(16)
        self._dash = b"--" + self.boundary.encode()

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def field(self, name: str, value: str) -> bytes:
        """A whole text part."""
        disposition = f'\r\nContent-Disposition: form-data; name="{_plain(name)}"\r\n\r\n'
        return self._dash + disposition.encode() + value.encode() + b"\r\n"

    def file_head(self, name: str, filename: str, content_type: str) -> bytes:
        """A file part's headers; its bytes follow, then `file_end()`."""
        return (
            self._dash
            + (
                f'\r\nContent-Disposition: form-data; name="{_plain(name)}"; '
                f'filename="{_plain(filename)}"\r\nContent-Type: {_plain(content_type)}\r\n\r\n'
            ).encode()
        )

    @staticmethod
    def file_end() -> bytes:
        return b"\r\n"

    def end(self) -> bytes:
        return self._dash + b"--\r\n"
