"""The files janitor on every backend, with a real local blob store: it removes expired files and
uploads whose process died (row, quota charge and blob), leaves live uploads and kept files
alone, and sweeps the store's stale temporaries."""

from __future__ import annotations

import os
import time
from pathlib import Path

from actors.files_janitor import FilesJanitor
from protocol.ids import ordered_id
from storage import Storage
from storage.blobs import LocalBlobStore
from storage.files import NewUpload
from storage.images import ImageRecord

HOUR_US = 3600 * 1_000_000
QUOTA = 10**9


async def _begin(storage: Storage, blobs: LocalBlobStore, org_id: str, now: int) -> NewUpload:
    file_id = ordered_id("file", now)
    new = NewUpload(
        id=file_id,
        org_id=org_id,
        purpose="user_data",
        filename="f",
        blob_key=f"files/{org_id}/{file_id}",
        data_key_sealed="v1:x",
        created_at=now,
    )
    await storage.files.begin_upload(new, reserve=100, quota=QUOTA)
    async with await blobs.open_writer(new.blob_key) as writer:
        await writer.write(b"ciphertext")
        await writer.commit()
    return new


async def test_the_janitor_removes_what_is_dead_or_expired_and_nothing_else(
    storage: Storage, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    org = (await storage.orgs.create("acme")).id
    now = int(time.time() * 1_000_000)
    dead = await _begin(storage, blobs, org, now - HOUR_US)  # crashed after its blob commit
    live = await _begin(storage, blobs, org, now - HOUR_US)
    await storage.files.touch(org, live.id, now=now)  # still streaming
    expired = await _begin(storage, blobs, org, now - 2 * HOUR_US)
    await storage.files.complete(
        org,
        expired.id,
        size=10,
        media_type="image/png",
        purpose="vision",
        expires_at=now - HOUR_US,
        now=now - 2 * HOUR_US,
    )
    kept = await _begin(storage, blobs, org, now - 2 * HOUR_US)
    await storage.files.complete(
        org,
        kept.id,
        size=10,
        media_type="text/plain",
        purpose="user_data",
        expires_at=None,
        now=now - 2 * HOUR_US,
    )
    temporaries = tmp_path / "blobs" / ".tmp"
    temporaries.mkdir(parents=True, exist_ok=True)
    old = temporaries / "crashed.part"
    old.write_bytes(b"half")
    os.utime(old, (time.time() - 7200, time.time() - 7200))

    janitor = FilesJanitor(storage.files, blobs, stale_upload_s=600)
    await janitor.sweep_once(now)

    assert janitor.statistics() == {
        "expired": 1,
        "abandoned_uploads": 1,
        "temporaries": 1,
        "expired_images": 0,
        "runs": 1,
    }
    assert not await blobs.exists(dead.blob_key)
    assert not await blobs.exists(expired.blob_key)
    assert await blobs.exists(live.blob_key) and await blobs.exists(kept.blob_key)
    assert await storage.files.uploading(org, dead.id) is None
    assert await storage.files.uploading(org, live.id) is not None
    assert await storage.files.get(org, kept.id, now=now) is not None
    assert await storage.files.usage(org) == 100 + 10  # the live upload's reservation + kept
    await janitor.sweep_once(now)  # nothing more to do
    assert janitor.statistics()["abandoned_uploads"] == 1


async def _image(
    storage: Storage, blobs: LocalBlobStore, org_id: str, expires_at: int
) -> ImageRecord:
    image_id = ordered_id("img", expires_at)
    record = ImageRecord(
        id=image_id,
        org_id=org_id,
        token_hash=os.urandom(32).hex(),
        blob_key=f"images/{org_id}/{image_id}",
        data_key_sealed="v1:x",
        bytes=10,
        media_type="image/png",
        created_at=expires_at - HOUR_US,
        expires_at=expires_at,
    )
    async with await blobs.open_writer(record.blob_key) as writer:
        await writer.write(b"ciphertext")
        await writer.commit()
    await storage.images.insert(record)
    return record


async def test_the_janitor_removes_expired_images_in_batches_and_keeps_live_ones(
    storage: Storage, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    org = (await storage.orgs.create("acme")).id
    now = int(time.time() * 1_000_000)
    expired = [await _image(storage, blobs, org, now - i - 1) for i in range(5)]
    live = await _image(storage, blobs, org, now + HOUR_US)
    janitor = FilesJanitor(storage.files, blobs, images=storage.images, batch=2)
    await janitor.sweep_once(now)
    assert janitor.statistics()["expired_images"] == 5
    for record in expired:
        assert not await blobs.exists(record.blob_key)
    assert await blobs.exists(live.blob_key)
    assert await storage.images.count() == 1
    # An hour later the live one has expired too.
    await janitor.sweep_once(now + HOUR_US)
    assert janitor.statistics()["expired_images"] == 6
    assert await storage.images.count() == 0
