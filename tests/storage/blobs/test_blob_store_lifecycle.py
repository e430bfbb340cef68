"""What surrounds the shared behaviour: a crashed writer's leftovers swept, memory bounded
during a large write, the S3 bucket created at start, an unreachable store reported."""

from __future__ import annotations

import socket
import time
import tracemalloc

import pytest
import trio

from protocol.ids import random_token
from storage.blobs import LocalBlobStore, S3BlobStore, S3Settings
from storage.blobs.s3 import PART_SIZE
from storage.errors import BlobStoreUnavailable
from tests.seaweedfs import SeaweedFS
from tests.storage.blobs.conftest import StoreUnderTest, s3_settings

MiB = 1024 * 1024


async def test_a_crashed_writers_leftovers_are_swept(blob_store: StoreUnderTest) -> None:
    store = blob_store.store
    writer = await store.open_writer("files/org_1/crashed")
    await writer.write(b"\x01" * (PART_SIZE + 1))  # a temp file, or an upload with a part
    del writer  # neither committed nor aborted: the process died here
    left = await blob_store.leftovers()
    assert left and "files/org_1/crashed" not in left
    assert not await store.exists("files/org_1/crashed")
    assert await store.remove_stale(older_than_s=3600) == 0  # may still be in progress
    await trio.sleep(1.5)
    assert await store.remove_stale(older_than_s=1) == 1
    assert await blob_store.leftovers() == []


async def test_memory_stays_bounded_during_a_large_write(blob_store: StoreUnderTest) -> None:
    """48 MiB written in 1 MiB chunks: Python allocations peak at a few parts, not the size."""
    block = bytes(range(256)) * 4096  # 1 MiB, reused: only the store's buffers are counted
    tracemalloc.start()
    try:
        async with await blob_store.store.open_writer("files/org_1/bounded") as writer:
            for _ in range(48):
                await writer.write(block)
            await writer.commit()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    bound = 4 * MiB if blob_store.kind == "local" else 3 * PART_SIZE + 4 * MiB
    assert peak < bound, f"peak {peak / MiB:.1f} MiB"
    assert await blob_store.store.size("files/org_1/bounded") == 48 * MiB


async def test_s3_bucket_is_created_at_start_when_missing(seaweedfs: SeaweedFS) -> None:
    bucket = f"created-{random_token(10).lower()}"
    client = seaweedfs.client()
    names = await trio.to_thread.run_sync(
        lambda: [b["Name"] for b in client.list_buckets()["Buckets"]]
    )
    assert bucket not in names
    store = await S3BlobStore.open(s3_settings(seaweedfs, bucket=bucket))
    try:
        async with await store.open_writer("files/org_1/x") as writer:
            await writer.write(b"here")
            await writer.commit()
    finally:
        await store.aclose()
    again = await S3BlobStore.open(s3_settings(seaweedfs, bucket=bucket))  # exists: fine
    try:
        assert await again.size("files/org_1/x") == 4
        assert bucket in again.describe() and seaweedfs.secret_access_key not in repr(
            again.settings
        )
    finally:
        await again.aclose()


async def test_an_unreachable_s3_endpoint_is_unavailable() -> None:
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = S3Settings(
        bucket="nowhere",
        endpoint_url=f"http://127.0.0.1:{port}",
        access_key_id="key-id-123",
        secret_access_key="secret-456",
    )
    with pytest.raises(BlobStoreUnavailable) as caught:
        await S3BlobStore.open(settings)
    assert "unreachable" in str(caught.value)
    assert "secret-456" not in str(caught.value) and "secret-456" not in repr(settings)


async def test_unfinished_writes_of_a_dead_run_are_removed_and_no_others(
    blob_store: StoreUnderTest,
) -> None:
    """At an instance's start (actors/files_janitor.py): the temporaries its slot's earlier run
    marked (local) or the unfinished uploads to its leftover rows' keys (S3) go at once; another
    instance's write in progress stays."""
    store, other = blob_store.store, blob_store.store
    if isinstance(store, LocalBlobStore):
        store = LocalBlobStore(blob_store.store.root, owner="inst-0")
        other = LocalBlobStore(blob_store.store.root, owner="inst-1")
    dead = await store.open_writer("files/org_1/crashed")
    await dead.write(b"\x01" * (PART_SIZE + 1))
    del dead  # neither committed nor aborted: the process died here
    before = await blob_store.leftovers()
    async with await other.open_writer("files/org_1/in-progress") as alive:
        await alive.write(b"\x02" * (PART_SIZE + 1))
        in_progress = set(await blob_store.leftovers()) - set(before)
        assert len(in_progress) == 1
        removed = await store.remove_unfinished(
            ["files/org_1/crashed"], started_before=time.time() + 1
        )
        assert removed == 1
        assert set(await blob_store.leftovers()) == in_progress
        await alive.commit()
    assert await store.remove_unfinished([], started_before=time.time() + 1) == 0
