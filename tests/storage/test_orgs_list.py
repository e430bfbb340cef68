"""OrgRepository.list_all (the console's organization selector): by name, bounded."""

from __future__ import annotations

import pytest

from storage.open import Storage

pytestmark = pytest.mark.storage


async def test_orgs_are_listed_by_name_up_to_the_limit(storage: Storage) -> None:
    assert await storage.orgs.list_all() == []
    for name in ("zeta", "alpha", "mid"):
        await storage.orgs.create(name)
    listed = await storage.orgs.list_all()
    assert [o.name for o in listed] == ["alpha", "mid", "zeta"]
    assert [o.name for o in await storage.orgs.list_all(limit=2)] == ["alpha", "mid"]
