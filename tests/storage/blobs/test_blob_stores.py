"""The same behaviour on every blob store (local directory, S3 on SeaweedFS): round trips of
every size class, nothing visible before commit, nothing left by abort or cancellation,
idempotent delete, refused keys, concurrent writers, bounded reads."""

from __future__ import annotations

import hashlib

import pytest
import trio

from storage.blobs import READ_CHUNK, BlobStore
from storage.blobs.s3 import PART_SIZE
from storage.errors import BlobNotFound, InvalidBlobKey
from tests.storage.blobs.conftest import StoreUnderTest

MiB = 1024 * 1024


def pattern(size: int, seed: int = 0) -> bytes:
    """Non-repeating content, so a misplaced part or chunk changes the digest."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest() * 1024
        counter += 1
    return bytes(out[:size])


async def put(store: BlobStore, key: str, data: bytes, chunk: int = 64 * 1024) -> None:
    async with await store.open_writer(key) as writer:
        for start in range(0, len(data), chunk):
            await writer.write(data[start : start + chunk])
        await writer.commit()


async def get(store: BlobStore, key: str) -> tuple[bytes, int]:
    """The content and the largest chunk the reader yielded."""
    out = bytearray()
    largest = 0
    async with await store.read(key) as reader:
        async for chunk in reader:
            largest = max(largest, len(chunk))
            out += chunk
    return bytes(out), largest


@pytest.mark.parametrize("size", [0, 1, 100_000, PART_SIZE, PART_SIZE + 1])
async def test_round_trip(blob_store: StoreUnderTest, size: int) -> None:
    store = blob_store.store
    data = pattern(size, seed=size)
    await put(store, "files/org_1/file-a", data)
    assert await store.exists("files/org_1/file-a")
    assert await store.size("files/org_1/file-a") == size
    content, largest = await get(store, "files/org_1/file-a")
    assert content == data
    assert largest <= READ_CHUNK
    assert await blob_store.leftovers() == ["files/org_1/file-a"]


async def test_large_streamed_round_trip(blob_store: StoreUnderTest) -> None:
    """40 MiB in 1 MiB writes: five multipart parts on S3; read back in bounded chunks."""
    store = blob_store.store
    size = 40 * MiB + 12345
    expected = hashlib.sha256()
    async with await store.open_writer("files/org_1/big") as writer:
        for index in range(0, size, MiB):
            chunk = pattern(min(MiB, size - index), seed=index)
            expected.update(chunk)
            await writer.write(chunk)
        assert writer.bytes_written == size
        await writer.commit()
    got = hashlib.sha256()
    async with await store.read("files/org_1/big") as reader:
        assert reader.size == size
        async for chunk in reader:
            assert 0 < len(chunk) <= READ_CHUNK
            got.update(chunk)
    assert got.hexdigest() == expected.hexdigest()
    assert await blob_store.leftovers() == ["files/org_1/big"]


@pytest.mark.parametrize("size", [10, PART_SIZE * 2 + 5])
async def test_nothing_visible_before_commit(blob_store: StoreUnderTest, size: int) -> None:
    store = blob_store.store
    async with await store.open_writer("files/org_1/pending") as writer:
        await writer.write(pattern(size))
        assert not await store.exists("files/org_1/pending")
        with pytest.raises(BlobNotFound):
            await store.size("files/org_1/pending")
        with pytest.raises(BlobNotFound):
            await store.read("files/org_1/pending")
        await writer.commit()
    assert await store.size("files/org_1/pending") == size


@pytest.mark.parametrize("size", [0, 10, PART_SIZE * 2 + 5])
async def test_abort_leaves_nothing(blob_store: StoreUnderTest, size: int) -> None:
    store = blob_store.store
    writer = await store.open_writer("files/org_1/dropped")
    await writer.write(pattern(size))
    await writer.abort()
    await writer.abort()  # idempotent
    assert not await store.exists("files/org_1/dropped")
    assert await blob_store.leftovers() == []
    with pytest.raises(RuntimeError):
        await writer.write(b"more")
    with pytest.raises(RuntimeError):
        await writer.commit()


async def test_exception_in_block_aborts(blob_store: StoreUnderTest) -> None:
    store = blob_store.store
    with pytest.raises(ZeroDivisionError):
        async with await store.open_writer("files/org_1/failed") as writer:
            await writer.write(pattern(PART_SIZE + 1))
            1 / 0  # noqa: B018
    assert await blob_store.leftovers() == []


async def test_cancellation_mid_write_leaves_nothing(blob_store: StoreUnderTest) -> None:
    store = blob_store.store
    written = trio.Event()

    async def upload() -> None:
        async with await store.open_writer("files/org_1/cancelled") as writer:
            await writer.write(pattern(PART_SIZE * 2))  # an upload in progress on S3
            written.set()
            await trio.sleep_forever()  # a client that stalls, then goes away

    async with trio.open_nursery() as nursery:
        nursery.start_soon(upload)
        await written.wait()
        in_progress = await blob_store.leftovers()  # a temporary file, an unfinished upload
        assert in_progress and "files/org_1/cancelled" not in in_progress
        nursery.cancel_scope.cancel()
    assert await blob_store.leftovers() == []


async def test_commit_replaces_an_existing_object(blob_store: StoreUnderTest) -> None:
    store = blob_store.store
    await put(store, "files/org_1/same", b"first version")
    await put(store, "files/org_1/same", b"second")
    assert (await get(store, "files/org_1/same"))[0] == b"second"
    assert await blob_store.leftovers() == ["files/org_1/same"]


async def test_delete_is_idempotent(blob_store: StoreUnderTest) -> None:
    store = blob_store.store
    await put(store, "files/org_1/gone", b"bytes")
    await put(store, "files/org_1/kept", b"other")
    await store.delete("files/org_1/gone")
    await store.delete("files/org_1/gone")
    await store.delete("files/org_1/never-existed")
    await store.delete("files/nobody/never-existed")
    assert not await store.exists("files/org_1/gone")
    with pytest.raises(BlobNotFound):
        await store.read("files/org_1/gone")
    assert await blob_store.leftovers() == ["files/org_1/kept"]


async def test_a_key_prefix_is_not_an_object(blob_store: StoreUnderTest) -> None:
    store = blob_store.store
    await put(store, "files/org_1/file-a", b"x")
    assert not await store.exists("files/org_1")
    with pytest.raises(BlobNotFound):
        await store.read("files/org_1")
    await store.delete("files/org_1")  # not an object: nothing happens
    assert await store.exists("files/org_1/file-a")


INVALID_KEYS = [
    "",
    "/etc/passwd",
    "../outside",
    "files/../../outside",
    "files/./x",
    "files//x",
    "files/x/",
    ".tmp/x",
    "files/.hidden",
    "files\\x",
    "files/x\x00y",
    "files/x\ny",
    "files/\u00e9",
    "C:/x",
    "a" * 129,
    "/".join(["a"] * 9),
    "/".join(["a" * 100] * 6),
]


@pytest.mark.parametrize("key", INVALID_KEYS)
async def test_invalid_keys_are_refused(blob_store: StoreUnderTest, key: str) -> None:
    store = blob_store.store
    with pytest.raises(InvalidBlobKey):
        await store.open_writer(key)
    with pytest.raises(InvalidBlobKey):
        await store.read(key)
    with pytest.raises(InvalidBlobKey):
        await store.size(key)
    with pytest.raises(InvalidBlobKey):
        await store.exists(key)
    with pytest.raises(InvalidBlobKey):
        await store.delete(key)
    assert await blob_store.leftovers() == []


async def test_concurrent_writers_to_different_keys(blob_store: StoreUnderTest) -> None:
    store = blob_store.store
    contents = {
        f"files/org_{n % 2}/file-{n}": pattern(100_000 * n + PART_SIZE // 3, n) for n in range(6)
    }

    async with trio.open_nursery() as nursery:
        for key, data in contents.items():
            nursery.start_soon(put, store, key, data, 300_000)
    for key, data in contents.items():
        assert (await get(store, key))[0] == data
    assert await blob_store.leftovers() == sorted(contents)


async def test_a_reader_closed_early_releases_and_the_object_stays(
    blob_store: StoreUnderTest,
) -> None:
    store = blob_store.store
    data = pattern(3 * READ_CHUNK)
    await put(store, "files/org_1/partly-read", data)
    async with await store.read("files/org_1/partly-read") as reader:
        first = await reader.__anext__()
    assert first == data[: len(first)]
    await reader.aclose()  # idempotent
    with pytest.raises(StopAsyncIteration):
        await reader.__anext__()
    assert (await get(store, "files/org_1/partly-read"))[0] == data


async def test_remove_stale_spares_writes_in_progress(blob_store: StoreUnderTest) -> None:
    store = blob_store.store
    async with await store.open_writer("files/org_1/in-progress") as writer:
        await writer.write(pattern(PART_SIZE + 1))
        assert await store.remove_stale(older_than_s=3600) == 0
        await writer.commit()
    assert await store.read("files/org_1/in-progress") is not None


async def test_describe_names_the_place_not_secrets(blob_store: StoreUnderTest) -> None:
    text = blob_store.store.describe()
    assert ("local directory" in text) if blob_store.kind == "local" else ("S3 bucket" in text)
    assert "test-secret-key" not in text and "test-secret-key" not in repr(blob_store.store)


async def test_keys_of_the_scheme_are_accepted(blob_store: StoreUnderTest) -> None:
    key = f"files/org_{'A1b2' * 4}/file-{'Zz09' * 6}"
    await put(blob_store.store, key, b"ok")
    assert (await get(blob_store.store, key))[0] == b"ok"
