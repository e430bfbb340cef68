"""Validation of uploaded files while they stream, per purpose (docs/files.md).

No I/O. `validator_for(purpose)` gives a fresh validator; the upload's bytes are fed to it in
pieces of any size as they arrive (`feed(piece)`), then `finish()` returns the media type the
content proved to be (or None when the purpose does not inspect content). Either raises
`InvalidFile` (protocol/errors.py) at the first problem; memory and CPU are bounded whatever
the input (one carried JSONL line of at most 8 MiB, or a few bytes of an image header).

    fine-tune      fine_tune.py   JSONL in the chat fine-tuning format     invalid_jsonl
    batch          batch.py       JSONL against the batch envelope         invalid_jsonl
    vision         images.py      PNG/JPEG/WEBP, dimensions from header    unsupported_image_format,
                                                                           invalid_image,
                                                                           image_too_large
    assistants     (none)         anything
    user_data      (none)         anything

`media_type(validated, filename)` (media.py) is the `Content-Type` to store and serve.
"""

from __future__ import annotations

from typing import Protocol

from protocol.files.batch import BatchValidator
from protocol.files.fine_tune import FineTuneValidator
from protocol.files.images import ImageValidator
from protocol.files.media import media_type

PURPOSES = ("fine-tune", "batch", "assistants", "vision", "user_data")

__all__ = ["PURPOSES", "FileValidator", "media_type", "validator_for"]


class FileValidator(Protocol):
    def feed(self, piece: bytes | bytearray | memoryview) -> None: ...

    def finish(self) -> str | None: ...


class AcceptAnything:
    """`assistants` and `user_data`: nothing to validate; the media type comes from the name."""

    def feed(self, piece: bytes | bytearray | memoryview) -> None:
        return None

    def finish(self) -> str | None:
        return None


def validator_for(purpose: str) -> FileValidator:
    """A fresh validator for one upload; ValueError for a purpose not in `PURPOSES`."""
    if purpose == "fine-tune":
        return FineTuneValidator()
    if purpose == "batch":
        return BatchValidator()
    if purpose == "vision":
        return ImageValidator()
    if purpose in ("assistants", "user_data"):
        return AcceptAnything()
    raise ValueError(f"unknown purpose {purpose!r}")
