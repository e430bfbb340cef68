"""Uploaded images of edits and variations: PNG, square, at most `MAX_UPLOAD_BYTES` each, and a
mask the size of its image (docs/decisions.md, "Images: uploads"). Checked from the header by
protocol/files/images.py (pixels are never decoded). No I/O."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import APIError, InvalidFile, invalid_request
from protocol.files.images import ImageValidator

MAX_UPLOAD_BYTES = 4 * 1024 * 1024  # OpenAI's dall-e-2 limit: "less than 4 MB"


@dataclass(frozen=True)
class PngInfo:
    width: int
    height: int


def check_png(data: bytes, param: str) -> PngInfo:
    """The PNG's dimensions; 400 naming `param` when it is no valid PNG or not square."""
    validator = ImageValidator()
    try:
        validator.feed(data)
        validator.finish()
    except InvalidFile as exc:
        raise invalid_request(f"`{param}`: {exc.message}", param=param, code=exc.code) from None
    if validator.format != "png":
        raise not_png(param)
    assert validator.width is not None and validator.height is not None
    if validator.width != validator.height:
        raise invalid_request(
            f"`{param}` must be a square PNG; it is {validator.width}x{validator.height}.",
            param=param,
            code="invalid_image",
        )
    return PngInfo(validator.width, validator.height)


def not_png(param: str) -> APIError:
    return invalid_request(
        f"`{param}` must be a PNG image.", param=param, code="unsupported_image_format"
    )
