"""The file store: what the Files routes (and later fine-tuning, batches and images) use to put
a file's content in, read it back and delete it. It joins the files table (storage/files.py),
the blob store (storage/blobs/), the content encryption (protocol/blobcrypt.py) and the quota.

Content is encrypted as it streams in, under a fresh data key per file; the key is stored
wrapped by the master key in the file's row (secretbox purpose `file-keys`, bound to the org
and the file id), never beside the blob. Blob keys are `files/<org id>/<file id>`: both are ids
the gateway made, so a client's filename never reaches a path or an object key.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

import trio

from protocol import blobcrypt
from protocol.blobcrypt import Decryptor
from protocol.errors import APIError, BlobCorrupt, SecretBoxError
from protocol.secretbox import SecretBox, unwrap_data_key
from services.keyring import recheck_after_failure
from storage.blobs import BlobReader, BlobStore
from storage.errors import BlobNotFound
from storage.files import FileRecord, FileRepository

VISION = "vision"
VISION_RETENTION_US = 24 * 3600 * 1_000_000  # the API: vision files expire after 24 hours


def blob_key(org_id: str, file_id: str) -> str:
    return f"files/{org_id}/{file_id}"


def key_context(org_id: str, file_id: str) -> tuple[str, str]:
    """The secretbox context of a file's data key (as storage/keyring.py re-seals it)."""
    return (org_id, file_id)


def expires_at(purpose: str, created_at: int) -> int | None:
    return created_at + VISION_RETENTION_US if purpose == VISION else None


def file_corrupt(record: FileRecord) -> APIError:
    """The stored content does not authenticate (tampered, truncated, or sealed under another
    key): refused, never served as garbage."""
    return APIError(
        500,
        f"The stored content of file {record.id!r} failed its integrity check and is not"
        " served; the operator has been told (log `gateway.files`).",
        type="server_error",
        code="file_corrupt",
    )


@dataclass(frozen=True)
class FileStore:
    repo: FileRepository
    blobs: BlobStore
    box: SecretBox  # purpose FILE_KEYS
    max_file_bytes: int  # `[server] max_file_body_bytes`
    max_vision_bytes: int  # `[server] max_vision_body_bytes`
    owner: str | None = None  # this process's instance slot (storage/instance_slot.py)

    def max_bytes(self, purpose: str | None) -> int:
        """The largest file of `purpose` (None: not known yet, the largest of all)."""
        return self.max_vision_bytes if purpose == VISION else self.max_file_bytes

    def data_key(self, record: FileRecord) -> bytes:
        return unwrap_data_key(
            self.box, record.data_key_sealed, key_context(record.org_id, record.id)
        )

    async def open_plaintext(self, record: FileRecord) -> AsyncGenerator[bytes, None]:
        """The file's content, decrypted chunk by chunk. Checks what can be checked before the
        first byte (the data key opens, the blob exists and has exactly the size the stored
        length implies) and raises `BlobCorrupt` for any of them; a chunk that fails later
        raises `BlobCorrupt` from the iteration, after the earlier chunks were given out.
        Close the generator (`contextlib.aclosing`) when not reading it to the end."""
        try:
            key = self.data_key(record)
        except SecretBoxError as exc:
            await recheck_after_failure(self.box)  # master_key_rotated if that is why
            raise BlobCorrupt(f"data key of {record.id} does not open") from exc
        try:
            reader = await self.blobs.read(record.blob_key)
        except BlobNotFound as exc:
            raise BlobCorrupt(f"blob of {record.id} is missing") from exc
        if reader.size != blobcrypt.ciphertext_size(record.bytes):
            await reader.aclose()
            raise BlobCorrupt(f"blob of {record.id} has {reader.size} bytes, not the expected")
        return _decrypted(reader, Decryptor(key, record.id))

    async def delete_blob(self, key: str) -> None:
        """Delete a blob, shielded and bounded: it runs on the way out of cancelled requests.
        A failure is swallowed by the caller's choice (the row, and so the data key, is gone
        already: what is left is unreadable)."""
        with trio.CancelScope(shield=True), trio.move_on_after(30):
            await self.blobs.delete(key)


async def _decrypted(reader: BlobReader, decryptor: Decryptor) -> AsyncGenerator[bytes, None]:
    try:
        async for sealed in reader:
            for plain in decryptor.feed(sealed):
                yield plain
        last = decryptor.finish()
        if last:
            yield last
    finally:
        with trio.CancelScope(shield=True):
            await reader.aclose()
