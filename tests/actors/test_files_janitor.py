"""The files janitor on every backend, with a real local blob store: it removes expired files and
uploads whose process died (row, quota charge and blob), leaves live uploads and kept files
alone, and sweeps the store's stale temporaries."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from actors.files_janitor import FilesJanitor
from protocol.ids import ordered_id
from protocol.timefmt import now_us
from storage import Storage
from storage.blobs import LocalBlobStore
from storage.files import NewUpload
from storage.images import ImageRecord
from storage.instance_slot import hold_slot
from tests.waiting import wait_until_async

HOUR_US = 3600 * 1_000_000
QUOTA = 10**9


async def _begin(
    storage: Storage, blobs: LocalBlobStore, org_id: str, now: int, owner: str | None = None
) -> NewUpload:
    file_id = ordered_id("file", now)
    new = NewUpload(
        id=file_id,
        org_id=org_id,
        purpose="user_data",
        filename="f",
        blob_key=f"files/{org_id}/{file_id}",
        data_key_sealed="v1:x",
        created_at=now,
        owner=owner,
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
        "leftovers": 0,
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


def _temporary(blobs_dir: Path, owner: str) -> Path:
    """What a process killed mid-write leaves in the local store (named as its writers name
    them: see test_a_writer_names_its_temporary_after_its_owner)."""
    path = blobs_dir / ".tmp" / f"{owner}.{os.urandom(8).hex()}.part"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"half")
    return path


async def test_a_writer_names_its_temporary_after_its_owner(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs", owner="abc-0")
    async with await blobs.open_writer("files/o/f") as writer:
        await writer.write(b"x" * 10)
        (name,) = os.listdir(tmp_path / "blobs" / ".tmp")
        assert name.startswith("abc-0.") and name.endswith(".part")
        await writer.commit()


async def test_an_instance_slot_is_taken_again_only_once_its_holder_is_gone(
    tmp_path: Path,
) -> None:
    with hold_slot(tmp_path) as first:
        with hold_slot(tmp_path) as second:
            assert first != second
        with hold_slot(tmp_path) as third:  # the second's holder is gone: its slot again
            assert third == second
    with hold_slot(tmp_path) as again:
        assert again == first


async def test_at_start_the_janitor_removes_its_slot_leftovers_at_once(
    storage: Storage, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A process killed mid-upload left a row holding quota and a temporary; the next process
    on its slot removes them as it starts (not 10 minutes or an hour later), and leaves alone
    those of another instance that is alive, and its own new uploads."""
    org = (await storage.orgs.create("acme")).id
    blobs_dir = tmp_path / "blobs"
    now = now_us()
    with hold_slot(tmp_path) as alive:
        with hold_slot(tmp_path) as crashed:
            pass  # its process is gone now (the kernel released the lock)
        dead = await _begin(storage, LocalBlobStore(blobs_dir), org, now - 1_000_000, crashed)
        await storage.files.touch(org, dead.id, now=now)  # it was streaming until the crash
        dead_temporary = _temporary(blobs_dir, crashed)
        other = await _begin(storage, LocalBlobStore(blobs_dir), org, now - 1_000_000, alive)
        other_temporary = _temporary(blobs_dir, alive)
        with hold_slot(tmp_path) as restarted:
            assert restarted == crashed
            blobs = LocalBlobStore(blobs_dir, owner=restarted)
            janitor = FilesJanitor(storage.files, blobs, interval_s=3600, owner=restarted)
            mine = await _begin(storage, blobs, org, now_us(), restarted)  # after its start
            async with trio.open_nursery() as nursery:
                await nursery.start(janitor.run)
                await wait_until_async(lambda: _ran(janitor))
                nursery.cancel_scope.cancel()
    assert janitor.statistics()["leftovers"] == 1
    assert await storage.files.uploading(org, dead.id) is None
    assert not await blobs.exists(dead.blob_key)
    assert not dead_temporary.exists()
    assert await storage.files.uploading(org, other.id) is not None and other_temporary.exists()
    assert await storage.files.uploading(org, mine.id) is not None
    assert await storage.files.usage(org) == 100 + 100  # the other's and the new reservation
    assert any("left unfinished" in r.getMessage() for r in caplog.records)


async def _ran(janitor: FilesJanitor) -> bool:
    return janitor.runs >= 1
