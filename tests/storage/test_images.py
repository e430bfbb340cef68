"""The images table (migration 0009) on every backend: found by token hash while unexpired,
listed for the janitor once expired, removed once, token hashes unique."""

from __future__ import annotations

import os

import pytest

from storage import Storage
from storage.errors import StorageError
from storage.images import ImageRecord

HOUR_US = 3600 * 1_000_000
NOW = 1_800_000_000_000_000


def record(org_id: str, i: int, expires_at: int, token_hash: str | None = None) -> ImageRecord:
    return ImageRecord(
        id=f"img_{i:04d}",
        org_id=org_id,
        token_hash=token_hash or os.urandom(32).hex(),
        blob_key=f"images/{org_id}/img_{i:04d}",
        data_key_sealed="v1:sealed",
        bytes=100 + i,
        media_type="image/png",
        created_at=expires_at - HOUR_US,
        expires_at=expires_at,
    )


async def test_lookup_by_token_until_expiry(storage: Storage) -> None:
    org = (await storage.orgs.create("acme")).id
    image = record(org, 1, NOW + HOUR_US)
    await storage.images.insert(image)
    assert await storage.images.by_token(image.token_hash, now=NOW) == image
    assert await storage.images.by_token(image.token_hash, now=NOW + HOUR_US) is None
    assert await storage.images.by_token("0" * 64, now=NOW) is None


async def test_expired_in_expiry_order_and_remove_once(storage: Storage) -> None:
    org = (await storage.orgs.create("acme")).id
    for i, at in enumerate((NOW - 1, NOW - 3, NOW + 1, NOW - 2)):
        await storage.images.insert(record(org, i, at))
    expired = await storage.images.expired(now=NOW, limit=10)
    assert [r.id for r in expired] == ["img_0001", "img_0003", "img_0000"]
    assert [r.id for r in await storage.images.expired(now=NOW, limit=2)] == [
        "img_0001",
        "img_0003",
    ]
    assert await storage.images.remove(expired[0])
    assert not await storage.images.remove(expired[0])
    assert await storage.images.count() == 3


async def test_token_hashes_are_unique(storage: Storage) -> None:
    org = (await storage.orgs.create("acme")).id
    await storage.images.insert(record(org, 1, NOW, token_hash="ab" * 32))
    with pytest.raises(StorageError):
        await storage.images.insert(record(org, 2, NOW, token_hash="ab" * 32))
