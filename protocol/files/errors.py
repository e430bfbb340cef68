"""The one exception a file validator raises, and its rendering as the client's 400.

Codes:

    invalid_jsonl              a `fine-tune` or `batch` line is malformed (the message names the
                               1-based line number and what is wrong)
    unsupported_image_format   a `vision` file is not PNG, JPEG or WEBP by its magic bytes
    invalid_image              a `vision` file's header is malformed or truncated
    image_too_large            a `vision` image's dimensions exceed the limits (images.py)
"""

from __future__ import annotations

from protocol.errors import APIError, invalid_request


class InvalidFile(Exception):
    """The upload is not acceptable for its purpose; `param` is the multipart field (`file`)."""

    def __init__(self, code: str, message: str, param: str = "file") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param

    def api_error(self) -> APIError:
        """The 400 answered to the client, in the OpenAI error shape."""
        return invalid_request(self.message, param=self.param, code=self.code)

    def __repr__(self) -> str:
        return f"InvalidFile({self.code!r}, {self.message!r})"
