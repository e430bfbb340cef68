"""The responses table (migration 0010) on every backend: found by id within its organization
while unexpired, deleted once, expired rows removed in batches."""

from __future__ import annotations

from storage import Storage
from storage.responses import ResponseRecord

DAY_US = 86_400 * 1_000_000
NOW = 1_800_000_000_000_000


def record(org_id: str, i: int, expires_at: int) -> ResponseRecord:
    return ResponseRecord(
        id=f"resp_{i:04d}",
        org_id=org_id,
        model="small",
        data_key_sealed="v1:sealed",
        content_encrypted="v1:content",
        created_at=expires_at - 30 * DAY_US,
        expires_at=expires_at,
    )


async def test_found_within_its_org_until_expiry(storage: Storage) -> None:
    acme = (await storage.orgs.create("acme")).id
    other = (await storage.orgs.create("other")).id
    r = record(acme, 1, NOW + DAY_US)
    await storage.responses.insert(r)
    assert await storage.responses.get(acme, r.id, now=NOW) == r
    assert await storage.responses.get(other, r.id, now=NOW) is None
    assert await storage.responses.get(acme, r.id, now=NOW + DAY_US) is None
    assert await storage.responses.get(acme, "resp_none", now=NOW) is None
    assert "content" not in repr(r).replace("content=***", "")


async def test_delete_once_within_its_org_and_not_once_expired(storage: Storage) -> None:
    acme = (await storage.orgs.create("acme")).id
    other = (await storage.orgs.create("other")).id
    live, old = record(acme, 1, NOW + DAY_US), record(acme, 2, NOW - 1)
    await storage.responses.insert(live)
    await storage.responses.insert(old)
    assert not await storage.responses.delete(other, live.id, now=NOW)
    assert not await storage.responses.delete(acme, old.id, now=NOW)
    assert await storage.responses.delete(acme, live.id, now=NOW)
    assert not await storage.responses.delete(acme, live.id, now=NOW)
    assert await storage.responses.count() == 1


async def test_expired_rows_are_removed_in_batches_and_live_ones_kept(storage: Storage) -> None:
    acme = (await storage.orgs.create("acme")).id
    for i, at in enumerate((NOW - 3, NOW, NOW + 1, NOW - 2, NOW - 1)):
        await storage.responses.insert(record(acme, i, at))
    assert await storage.responses.remove_expired(now=NOW, limit=2) == 2
    assert await storage.responses.remove_expired(now=NOW, limit=10) == 2
    assert await storage.responses.remove_expired(now=NOW, limit=10) == 0
    assert await storage.responses.count() == 1
    assert await storage.responses.get(acme, "resp_0002", now=NOW) is not None
