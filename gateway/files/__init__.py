"""Files: the API routes (routes.py), one upload's pipeline (upload.py) and the store joining
rows, blobs and encryption (store.py). `open_file_store` builds the store from `[files]`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway.config import Config
from protocol.secretbox import FILE_KEYS, SecretBox
from services.files import FileStore
from storage.blobs import BlobStore, LocalBlobStore, S3BlobStore, S3Settings
from storage.files import FileRepository
from storage.instance_slot import hold_slot

__all__ = ["FileStore", "open_blob_store", "open_file_store"]


@asynccontextmanager
async def open_blob_store(config: Config, owner: str = "") -> AsyncIterator[BlobStore]:
    """`<data_dir>/blobs` for store = "local"; the S3 bucket (created if missing) for "s3".
    `owner` marks this process's temporaries (storage/instance_slot.py)."""
    files = config.files
    store: BlobStore
    if files.store == "s3":
        assert files.s3_bucket is not None  # the loader requires it
        store = await S3BlobStore.open(
            S3Settings(
                bucket=files.s3_bucket,
                endpoint_url=files.s3_endpoint_url,
                region=files.s3_region,
                prefix=files.s3_prefix,
                access_key_id=files.s3_access_key_id,
                secret_access_key=files.s3_secret_access_key,
            )
        )
    else:
        store = LocalBlobStore(config.data_dir / "blobs", owner=owner)
    try:
        yield store
    finally:
        await store.aclose()


@asynccontextmanager
async def open_file_store(
    config: Config, repo: FileRepository, master_key: bytes
) -> AsyncIterator[FileStore]:
    """The store, owning what this process leaves unfinished under its instance slot."""
    with hold_slot(config.data_dir) as owner:
        async with open_blob_store(config, owner) as blobs:
            yield FileStore(
                repo,
                blobs,
                SecretBox.for_purpose(master_key, FILE_KEYS),
                max_file_bytes=config.server.max_file_body_bytes,
                max_vision_bytes=config.server.max_vision_body_bytes,
                owner=owner,
            )
