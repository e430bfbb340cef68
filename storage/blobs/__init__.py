"""Blob stores: opaque byte objects under keys the code makes, on a local directory or an
S3-compatible object store, behind one streamed interface.

    store = LocalBlobStore(data_dir / "blobs")         # or: await S3BlobStore.open(...)
    async with await store.open_writer("files/org_1/file-abc") as writer:
        await writer.write(chunk)                         # as often as needed
        await writer.commit()                             # only now is the key readable
    async with await store.read("files/org_1/file-abc") as reader:
        async for chunk in reader:                        # at most READ_CHUNK bytes each
            ...

Nothing is visible under a key before `commit()`; a writer left without it (an exception, a
cancellation) is aborted by its `async with`, and what a crash leaves is a temporary that no
reader can reach and `remove_stale()` deletes. Keys are validated (`validate_key`) so a key can
name nothing but an object of the store. Content is opaque here: the caller encrypts it.
"""

from storage.blobs.interface import (
    READ_CHUNK,
    BlobReader,
    BlobStore,
    BlobWriter,
    validate_key,
)
from storage.blobs.local import LocalBlobStore
from storage.blobs.s3 import S3BlobStore, S3Settings

__all__ = [
    "READ_CHUNK",
    "BlobReader",
    "BlobStore",
    "BlobWriter",
    "LocalBlobStore",
    "S3BlobStore",
    "S3Settings",
    "validate_key",
]
