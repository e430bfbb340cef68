"""The files repository on every backend: an upload's reservation grows, completes to the exact
size or is abandoned; the quota counter always equals the sum of the rows' charges; concurrent
reservations never pass the quota; lists page by creation time; expired files are hidden at
once; the janitor's reads and removals."""

from __future__ import annotations

import pytest
import trio

from protocol.ids import ordered_id
from storage import Storage
from storage.errors import QuotaExceeded, StorageError
from storage.files import PROCESSED, UPLOADING, NewUpload

QUOTA = 1000


async def _org(storage: Storage) -> str:
    return (await storage.orgs.create("acme")).id


def _upload(org_id: str, now: int = 1_000_000, purpose: str = "user_data") -> NewUpload:
    file_id = ordered_id("file", now)
    return NewUpload(
        id=file_id,
        org_id=org_id,
        purpose=purpose,
        filename="a.txt",
        blob_key=f"files/{org_id}/{file_id}",
        data_key_sealed="v1:sealed",
        created_at=now,
    )


async def _charges(storage: Storage, org_id: str) -> int:
    total = await storage.db.fetchval(
        "SELECT COALESCE(SUM(charged_bytes), 0) FROM files WHERE org_id = :org", {"org": org_id}
    )
    return int(total)


async def _stored(storage: Storage, org_id: str, size: int, now: int = 1_000_000) -> str:
    new = _upload(org_id, now)
    await storage.files.begin_upload(new, reserve=size, quota=QUOTA)
    await storage.files.complete(
        org_id,
        new.id,
        size=size,
        media_type="text/plain",
        purpose="user_data",
        expires_at=None,
        now=now,
    )
    return new.id


async def test_an_upload_reserves_grows_and_completes_to_its_exact_size(storage: Storage) -> None:
    repo = storage.files
    org = await _org(storage)
    new = _upload(org)
    assert await repo.begin_upload(new, reserve=100, quota=QUOTA) == 100
    assert await repo.get(org, new.id, now=2) is None  # an upload in progress is not shown
    assert await repo.reserve_more(org, new.id, want=200, need=50, quota=QUOTA, now=3) == 200
    assert await repo.usage(org) == 300 == await _charges(storage, org)
    record = await repo.complete(
        org,
        new.id,
        size=280,
        media_type="text/plain",
        purpose="fine-tune",
        expires_at=None,
        now=4,
    )
    assert (record.status, record.bytes, record.charged_bytes) == (PROCESSED, 280, 280)
    assert record.purpose == "fine-tune"  # a purpose sent after the file is set at the end
    assert await repo.usage(org) == 280 == await _charges(storage, org)
    assert await repo.get(org, new.id, now=5) == record


async def test_near_the_quota_a_reservation_falls_back_to_what_is_needed(storage: Storage) -> None:
    repo = storage.files
    org = await _org(storage)
    await _stored(storage, org, 900)
    new = _upload(org)
    assert await repo.begin_upload(new, reserve=500, quota=QUOTA) == 0  # no room for 500
    assert await repo.reserve_more(org, new.id, want=500, need=100, quota=QUOTA, now=2) == 100
    with pytest.raises(QuotaExceeded):
        await repo.reserve_more(org, new.id, want=500, need=1, quota=QUOTA, now=3)
    assert await repo.usage(org) == 1000 == await _charges(storage, org)


async def test_an_org_over_its_quota_cannot_begin(storage: Storage) -> None:
    org = await _org(storage)
    await _stored(storage, org, 900)
    with pytest.raises(QuotaExceeded):
        await storage.files.begin_upload(_upload(org), reserve=0, quota=800)
    assert await storage.db.fetchval("SELECT COUNT(*) FROM files") == 1


async def test_abandon_and_delete_give_the_bytes_back(storage: Storage) -> None:
    repo = storage.files
    org = await _org(storage)
    kept = await _stored(storage, org, 300)
    new = _upload(org)
    await repo.begin_upload(new, reserve=400, quota=QUOTA)
    assert await repo.abandon(org, new.id)
    assert not await repo.abandon(org, new.id)
    assert await repo.usage(org) == 300
    with pytest.raises(StorageError):  # the row is gone: the upload cannot go on
        await repo.reserve_more(org, new.id, want=1, need=1, quota=QUOTA, now=2)
    deleted = await repo.delete(org, kept, now=2)
    assert deleted is not None and deleted.id == kept
    assert await repo.delete(org, kept, now=2) is None
    assert await repo.usage(org) == 0 == await _charges(storage, org)


async def test_another_orgs_file_is_invisible(storage: Storage) -> None:
    org = await _org(storage)
    other = (await storage.orgs.create("other")).id
    file_id = await _stored(storage, org, 10)
    assert await storage.files.get(other, file_id, now=2) is None
    assert await storage.files.delete(other, file_id, now=2) is None
    assert await storage.files.get(org, file_id, now=2) is not None


async def test_concurrent_reservations_never_pass_the_quota(storage: Storage) -> None:
    repo = storage.files
    org = await _org(storage)
    granted: list[int] = []
    refused = 0

    async def upload(i: int) -> None:
        nonlocal refused
        new = _upload(org, 1_000_000 + i)
        try:
            await repo.begin_upload(new, reserve=0, quota=QUOTA)
            for _ in range(5):
                granted.append(
                    await repo.reserve_more(org, new.id, want=70, need=70, quota=QUOTA, now=2)
                )
        except QuotaExceeded:
            refused += 1

    async with trio.open_nursery() as nursery:
        for i in range(12):  # 12 × 5 × 70 = 4,200 bytes wanted of 1,000
            nursery.start_soon(upload, i)
    assert sum(granted) == 70 * (QUOTA // 70)  # every grant that fits, and not one more
    assert refused >= 12 - (QUOTA // 70) // 5  # at most two uploads got all five grants
    assert await repo.usage(org) == sum(granted) == await _charges(storage, org)


async def test_lists_page_by_creation_time_either_way(storage: Storage) -> None:
    repo = storage.files
    org = await _org(storage)
    ids = [await _stored(storage, org, 1, now=1_000_000 + i) for i in range(5)]
    page = await repo.list_for_org(org, purpose=None, limit=2, order="desc", after=None, now=9)
    assert [r.id for r in page.items] == [ids[4], ids[3]]
    assert page.has_more
    page = await repo.list_for_org(org, purpose=None, limit=2, order="desc", after=ids[3], now=9)
    assert [r.id for r in page.items] == [ids[2], ids[1]]
    page = await repo.list_for_org(org, purpose=None, limit=10, order="asc", after=ids[1], now=9)
    assert [r.id for r in page.items] == ids[2:]
    assert not page.has_more
    page = await repo.list_for_org(
        org, purpose="fine-tune", limit=10, order="asc", after=None, now=9
    )
    assert page.items == []


async def test_expired_files_are_hidden_at_once_and_found_by_the_janitor(
    storage: Storage,
) -> None:
    repo = storage.files
    org = await _org(storage)
    new = _upload(org, purpose="vision")
    await repo.begin_upload(new, reserve=10, quota=QUOTA)
    await repo.complete(
        org,
        new.id,
        size=10,
        media_type="image/png",
        purpose="vision",
        expires_at=5_000,
        now=1_000,
    )
    assert await repo.get(org, new.id, now=4_999) is not None
    assert await repo.get(org, new.id, now=5_000) is None
    listed = await repo.list_for_org(org, purpose=None, limit=10, order="asc", after=None, now=6)
    assert [r.id for r in listed.items] == [new.id]
    listed = await repo.list_for_org(
        org, purpose=None, limit=10, order="asc", after=None, now=5_000
    )
    assert listed.items == []
    assert await repo.delete(org, new.id, now=5_000) is None
    (expired,) = await repo.expired(now=5_000, limit=10)
    assert await repo.remove(expired)
    assert not await repo.remove(expired)
    assert await repo.usage(org) == 0


async def test_a_stale_upload_is_removed_but_a_live_one_is_not(storage: Storage) -> None:
    repo = storage.files
    org = await _org(storage)
    new = _upload(org, now=1_000)
    await repo.begin_upload(new, reserve=50, quota=QUOTA)
    (stale,) = await repo.stale_uploads(before=2_000, limit=10)
    assert stale.status == UPLOADING
    await repo.touch(org, new.id, now=3_000)  # the upload moved after the janitor's read
    assert not await repo.remove(stale)
    assert await repo.stale_uploads(before=2_000, limit=10) == []
    (stale,) = await repo.stale_uploads(before=4_000, limit=10)
    assert await repo.remove(stale)
    assert await repo.usage(org) == 0
