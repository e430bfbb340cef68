"""`blob_store`: each behaviour test runs on the local store and on the S3 store (against the
session's SeaweedFS, one bucket shared, a key prefix per test), with `leftovers()` to see
everything the store holds, temporaries and unfinished uploads included."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from protocol.ids import random_token
from storage.blobs import BlobStore, LocalBlobStore, S3BlobStore, S3Settings
from tests.seaweedfs import SeaweedFS, seaweedfs

__all__ = ["seaweedfs"]  # the session fixture, used below and by the tests here

SESSION_BUCKET = "blob-tests"


@dataclass
class StoreUnderTest:
    kind: str
    store: BlobStore
    # Every name the backend holds: committed objects and, marked, temporaries / uploads.
    leftovers: Callable[[], Awaitable[list[str]]]


def _local(root: Path) -> StoreUnderTest:
    store = LocalBlobStore(root)

    async def leftovers() -> list[str]:
        def walk() -> list[str]:
            return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())

        return await trio.to_thread.run_sync(walk)

    return StoreUnderTest("local", store, leftovers)


def s3_settings(server: SeaweedFS, bucket: str = SESSION_BUCKET, prefix: str = "") -> S3Settings:
    return S3Settings(
        bucket=bucket,
        endpoint_url=server.endpoint_url,
        region=server.region,
        access_key_id=server.access_key_id,
        secret_access_key=server.secret_access_key,
        prefix=prefix,
    )


async def _s3(server: SeaweedFS) -> StoreUnderTest:
    prefix = f"t{random_token(12).lower()}/"
    store = await S3BlobStore.open(s3_settings(server, prefix=prefix))
    client = server.client()

    async def leftovers() -> list[str]:
        def listing() -> list[str]:
            objects = client.list_objects_v2(Bucket=SESSION_BUCKET, Prefix=prefix)
            uploads = client.list_multipart_uploads(Bucket=SESSION_BUCKET, Prefix=prefix)
            names = [item["Key"].removeprefix(prefix) for item in objects.get("Contents", [])]
            names += [
                "upload:" + item["Key"].removeprefix(prefix) for item in uploads.get("Uploads", [])
            ]
            return sorted(names)

        return await trio.to_thread.run_sync(listing)

    return StoreUnderTest("s3", store, leftovers)


@pytest.fixture(params=["local", "s3"])
async def blob_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StoreUnderTest]:
    if request.param == "local":
        under_test = _local(tmp_path / "blobs")
    else:
        under_test = await _s3(request.getfixturevalue("seaweedfs"))
    try:
        yield under_test
    finally:
        await under_test.store.aclose()
