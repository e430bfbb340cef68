"""The provider keys repository on every backend: one key per (org, provider), replace keeps
the id, deletion removes the ciphertext, events and the credential epoch move with each change,
and `provider_key.invalid` is written at most once per key per interval."""

from __future__ import annotations

import pytest
import trio

from storage.errors import UniqueViolation
from storage.open import Storage
from storage.orgs import Org

HOUR_US = 3_600_000_000


async def _org(storage: Storage, name: str = "acme") -> Org:
    return await storage.orgs.create(name)


async def _event_types(storage: Storage, org: Org) -> list[str]:
    return [e.type for e in await storage.events.list_for_org(org.id)]


async def test_put_creates_then_replaces_keeping_the_id(storage: Storage) -> None:
    org = await _org(storage)
    epoch = await storage.keys.credentials_epoch()
    first, created = await storage.provider_keys.put(org.id, "openai", "v1:AAA", "abcd")
    assert created and first.id.startswith("pk_") and first.key_hint == "abcd"
    assert first.created_at == first.updated_at and first.last_rejected_at is None
    second, created = await storage.provider_keys.put(org.id, "openai", "v1:BBB", "wxyz")
    assert not created
    assert second.id == first.id and second.created_at == first.created_at
    assert second.updated_at >= first.updated_at and second.key_hint == "wxyz"
    used = await storage.provider_keys.for_use(org.id, "openai")
    assert used is not None and used.sealed_key == "v1:BBB" and used.id == first.id
    assert await storage.provider_keys.list(org.id) == [second]
    assert await _event_types(storage, org) == ["provider_key.created", "provider_key.updated"]
    events = await storage.events.list_for_org(org.id)
    assert events[1].data == {"provider_key_id": first.id, "provider": "openai", "key_hint": "wxyz"}
    assert await storage.keys.credentials_epoch() == epoch + 2


async def test_one_key_per_provider_and_org(storage: Storage) -> None:
    acme, other = await _org(storage), await _org(storage, "other")
    a, _ = await storage.provider_keys.put(acme.id, "openai", "v1:A", "")
    b, _ = await storage.provider_keys.put(acme.id, "anthropic", "v1:B", "")
    c, _ = await storage.provider_keys.put(other.id, "openai", "v1:C", "")
    assert len({a.id, b.id, c.id}) == 3
    assert [k.provider for k in await storage.provider_keys.list(acme.id)] == [
        "anthropic",
        "openai",
    ]
    assert await storage.provider_keys.get(other.id, a.id) is None  # not another org's
    assert await storage.provider_keys.get(acme.id, a.id) == a
    assert await storage.provider_keys.for_use(acme.id, "cohere") is None
    used = await storage.provider_keys.for_use(other.id, "openai")
    assert used is not None and used.sealed_key == "v1:C"
    # The table itself refuses a second row for one (org, provider).
    with pytest.raises(UniqueViolation):
        await storage.db.execute(
            "INSERT INTO provider_keys (id, org_id, provider, sealed_key, key_hint, created_at,"
            " updated_at) VALUES ('pk_dup', :org, 'openai', 'v1:D', '', 1, 1)",
            {"org": acme.id},
        )


async def test_concurrent_first_puts_leave_one_key(storage: Storage) -> None:
    org = await _org(storage)
    results: list[bool] = []

    async def put(sealed: str) -> None:
        _, created = await storage.provider_keys.put(org.id, "openai", sealed, "")
        results.append(created)

    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(put, f"v1:{i}")
    assert sorted(results) == [False, False, False, True]
    assert len(await storage.provider_keys.list(org.id)) == 1


async def test_delete_removes_the_row_and_its_ciphertext(storage: Storage) -> None:
    org = await _org(storage)
    record, _ = await storage.provider_keys.put(org.id, "openai", "v1:SECRET", "abcd")
    other = await _org(storage, "other")
    assert await storage.provider_keys.delete(other.id, record.id) is None
    epoch = await storage.keys.credentials_epoch()
    assert await storage.provider_keys.delete(org.id, record.id) == record
    assert await storage.provider_keys.delete(org.id, record.id) is None
    assert await storage.provider_keys.for_use(org.id, "openai") is None
    assert await storage.db.fetchval("SELECT count(*) FROM provider_keys") == 0
    assert await storage.keys.credentials_epoch() == epoch + 1
    assert (await _event_types(storage, org))[-1] == "provider_key.deleted"


async def test_rejection_is_recorded_once_per_interval(storage: Storage) -> None:
    org = await _org(storage)
    await storage.provider_keys.put(org.id, "openai", "v1:BAD", "abcd")
    used = await storage.provider_keys.for_use(org.id, "openai")
    assert used is not None
    repo = storage.provider_keys
    assert await repo.mark_rejected(org.id, used, status=401, interval_us=HOUR_US)
    assert not await repo.mark_rejected(org.id, used, status=401, interval_us=HOUR_US)
    record = await repo.get(org.id, used.id)
    assert record is not None and record.last_rejected_at is not None
    invalid = [e for e in await storage.events.list_for_org(org.id) if e.type.endswith("invalid")]
    assert [e.data for e in invalid] == [
        {
            "provider_key_id": used.id,
            "provider": "openai",
            "key_hint": "abcd",
            "upstream_status": 401,
        }
    ]
    # Past the interval (here: none), it is written again.
    assert await repo.mark_rejected(org.id, used, status=403, interval_us=0)


async def test_rejection_of_a_replaced_key_is_not_recorded(storage: Storage) -> None:
    org = await _org(storage)
    await storage.provider_keys.put(org.id, "openai", "v1:OLD", "")
    old = await storage.provider_keys.for_use(org.id, "openai")
    assert old is not None
    await storage.provider_keys.put(org.id, "openai", "v1:NEW", "")
    assert not await storage.provider_keys.mark_rejected(
        org.id, old, status=401, interval_us=HOUR_US
    )
    record = await storage.provider_keys.get(org.id, old.id)
    assert record is not None and record.last_rejected_at is None


async def test_replacing_clears_the_rejection(storage: Storage) -> None:
    org = await _org(storage)
    await storage.provider_keys.put(org.id, "openai", "v1:BAD", "")
    used = await storage.provider_keys.for_use(org.id, "openai")
    assert used is not None
    await storage.provider_keys.mark_rejected(org.id, used, status=401, interval_us=HOUR_US)
    replaced, _ = await storage.provider_keys.put(org.id, "openai", "v1:GOOD", "")
    assert replaced.last_rejected_at is None
    assert (await storage.provider_keys.get(org.id, used.id)) == replaced
