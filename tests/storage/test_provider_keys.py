"""The provider keys repository on every backend: one key per (org, provider), replace keeps
the id, deletion removes the ciphertext, events and the credential epoch move with each change,
and a key the provider refused is marked invalid once, with one `provider_key.invalid` event,
until it is replaced."""

from __future__ import annotations

import pytest
import trio

from storage.errors import UniqueViolation
from storage.open import Storage, open_database
from storage.orgs import Org


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


async def _invalid_events(storage: Storage, org: Org) -> list[dict[str, object]]:
    return [e.data for e in await storage.events.list_for_org(org.id) if e.type.endswith("invalid")]


async def test_a_refused_key_is_marked_invalid_once_with_one_event(storage: Storage) -> None:
    org = await _org(storage)
    created, _ = await storage.provider_keys.put(
        org.id, "openai", "v1:BAD", "abcd", fallback_to_gateway_key=True
    )
    assert created.invalid_since is None and created.fallback_to_gateway_key
    used = await storage.provider_keys.for_use(org.id, "openai")
    assert used is not None and used.invalid_since is None and used.fallback_to_gateway_key
    repo = storage.provider_keys
    epoch = await storage.keys.credentials_epoch()
    marked = await repo.mark_invalid(org.id, used, status=401)
    assert marked is not None and marked.invalid_since is not None
    assert marked.invalid_status == 401 and marked.last_rejected_at == marked.invalid_since
    assert await storage.keys.credentials_epoch() == epoch + 1  # every instance forgets it
    # Already invalid: nothing more, whatever the status and however often.
    assert await repo.mark_invalid(org.id, used, status=403) is None
    assert await repo.mark_invalid(org.id, used, status=401) is None
    assert await storage.keys.credentials_epoch() == epoch + 1
    assert await repo.get(org.id, used.id) == marked
    now_used = await repo.for_use(org.id, "openai")
    assert now_used is not None and now_used.invalid_since == marked.invalid_since
    assert now_used.invalid_status == 401 and now_used.fallback_to_gateway_key
    assert await _invalid_events(storage, org) == [
        {
            "provider_key_id": used.id,
            "provider": "openai",
            "status": 401,
            "reason": "The provider answered 401 Unauthorized: it does not know the key"
            " (revoked, expired or mistyped).",
        }
    ]


async def test_instances_marking_at_once_write_one_event(
    storage: Storage, database_url: str
) -> None:
    """Separate connection pools (as two gateway instances have), all reporting at once."""
    org = await _org(storage)
    await storage.provider_keys.put(org.id, "openai", "v1:BAD", "abcd")
    used = await storage.provider_keys.for_use(org.id, "openai")
    assert used is not None
    results: list[bool] = []

    async def instance() -> None:
        async with open_database(database_url) as db:
            other = Storage.over(db)

            async def report() -> None:
                marked = await other.provider_keys.mark_invalid(org.id, used, status=403)
                results.append(marked is not None)

            async with trio.open_nursery() as nursery:
                for _ in range(5):
                    nursery.start_soon(report)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(instance)
    assert sorted(results) == [False] * 14 + [True]
    events = await _invalid_events(storage, org)
    assert [(e["provider_key_id"], e["status"]) for e in events] == [(used.id, 403)]


async def test_a_replaced_or_deleted_key_is_not_marked(storage: Storage) -> None:
    org = await _org(storage)
    await storage.provider_keys.put(org.id, "openai", "v1:OLD", "")
    old = await storage.provider_keys.for_use(org.id, "openai")
    assert old is not None
    await storage.provider_keys.put(org.id, "openai", "v1:NEW", "")
    assert await storage.provider_keys.mark_invalid(org.id, old, status=401) is None
    record = await storage.provider_keys.get(org.id, old.id)
    assert record is not None and record.invalid_since is None and record.last_rejected_at is None
    await storage.provider_keys.delete(org.id, old.id)
    assert await storage.provider_keys.mark_invalid(org.id, old, status=401) is None
    assert await _invalid_events(storage, org) == []


async def test_replacing_makes_it_valid_and_sets_the_fallback_choice(storage: Storage) -> None:
    org = await _org(storage)
    await storage.provider_keys.put(org.id, "openai", "v1:BAD", "")
    used = await storage.provider_keys.for_use(org.id, "openai")
    assert used is not None
    await storage.provider_keys.mark_invalid(org.id, used, status=401)
    replaced, created = await storage.provider_keys.put(
        org.id, "openai", "v1:GOOD", "", fallback_to_gateway_key=True
    )
    assert not created and replaced.id == used.id
    assert replaced.invalid_since is None and replaced.invalid_status is None
    assert replaced.last_rejected_at is None and replaced.fallback_to_gateway_key
    assert (await storage.provider_keys.get(org.id, used.id)) == replaced
    again = await storage.provider_keys.for_use(org.id, "openai")
    assert again is not None and again.invalid_since is None and again.sealed_key == "v1:GOOD"
    # The new value can go bad in turn: a new mark, a second event.
    assert await storage.provider_keys.mark_invalid(org.id, again, status=403) is not None
    assert [e["status"] for e in await _invalid_events(storage, org)] == [401, 403]
    # Replacing without the field turns the fallback off again.
    plain, _ = await storage.provider_keys.put(org.id, "openai", "v1:THIRD", "")
    assert not plain.fallback_to_gateway_key
