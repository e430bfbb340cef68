"""The fine-tuned models repository (migration 0012) on every backend: registration is
idempotent, reads are per organization, deletion hides the model for good (a late second
registration cannot bring it back), and exactly one of concurrent deletes wins."""

from __future__ import annotations

import trio

from storage import Storage
from storage.fine_tuned_models import FineTunedModel

NOW = 1_800_000_000_000_000


def _name(org_id: str, n: int) -> str:
    return f"ft:gpt-4o-mini-2024-07-18:{org_id}:custom:ftjob_{n:04d}"


async def _register(storage: Storage, org_id: str, n: int, **changes: str) -> str:
    model_id = _name(org_id, n)
    fields = {
        "provider": "openai",
        "upstream_model": f"ft:gpt-4o-mini-2024-07-18:bench:custom:{n:04d}",
        "base_model": "gpt-4o-mini-2024-07-18",
        "job_id": f"ftjob_{n:04d}",
    } | changes
    await storage.fine_tuned_models.register(
        model_id=model_id, org_id=org_id, created_at_us=NOW + n, **fields
    )
    return model_id


async def test_register_then_get_list_for_its_org_only(storage: Storage) -> None:
    acme = (await storage.orgs.create("acme")).id
    other = (await storage.orgs.create("other")).id
    first = await _register(storage, acme, 2)
    second = await _register(storage, acme, 1)
    theirs = await _register(storage, other, 3)

    got = await storage.fine_tuned_models.get(acme, first)
    assert got == FineTunedModel(
        id=first,
        org_id=acme,
        provider="openai",
        upstream_model="ft:gpt-4o-mini-2024-07-18:bench:custom:0002",
        base_model="gpt-4o-mini-2024-07-18",
        job_id="ftjob_0002",
        created_at=NOW + 2,
    )
    assert await storage.fine_tuned_models.get(other, first) is None
    assert await storage.fine_tuned_models.get(acme, theirs) is None
    assert await storage.fine_tuned_models.get(acme, "ft:nothing") is None
    assert [m.id for m in await storage.fine_tuned_models.list(acme)] == [second, first]
    assert [m.id for m in await storage.fine_tuned_models.list(other)] == [theirs]


async def test_registering_again_is_a_no_op(storage: Storage) -> None:
    acme = (await storage.orgs.create("acme")).id
    model_id = await _register(storage, acme, 1)
    await _register(storage, acme, 1, upstream_model="something-else", job_id="ftjob_other")
    got = await storage.fine_tuned_models.get(acme, model_id)
    assert got is not None
    assert (got.upstream_model, got.job_id) == (
        "ft:gpt-4o-mini-2024-07-18:bench:custom:0001",
        "ftjob_0001",
    )
    assert len(await storage.fine_tuned_models.list(acme)) == 1


async def test_delete_hides_the_model_for_good(storage: Storage) -> None:
    acme = (await storage.orgs.create("acme")).id
    other = (await storage.orgs.create("other")).id
    model_id = await _register(storage, acme, 1)
    kept = await _register(storage, acme, 2)

    assert await storage.fine_tuned_models.delete(other, model_id) is None
    deleted = await storage.fine_tuned_models.delete(acme, model_id)
    assert deleted is not None and deleted.id == model_id
    assert deleted.upstream_model == "ft:gpt-4o-mini-2024-07-18:bench:custom:0001"
    assert await storage.fine_tuned_models.get(acme, model_id) is None
    assert await storage.fine_tuned_models.delete(acme, model_id) is None
    assert [m.id for m in await storage.fine_tuned_models.list(acme)] == [kept]

    await _register(storage, acme, 1)  # a watcher's late retry
    assert await storage.fine_tuned_models.get(acme, model_id) is None


async def test_one_of_concurrent_deletes_gets_the_model(storage: Storage) -> None:
    acme = (await storage.orgs.create("acme")).id
    model_id = await _register(storage, acme, 1)
    results: list[FineTunedModel | None] = []

    async def delete() -> None:
        results.append(await storage.fine_tuned_models.delete(acme, model_id))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(delete)
    assert sum(r is not None for r in results) == 1


async def test_hostile_names_are_plain_values(storage: Storage) -> None:
    acme = (await storage.orgs.create("acme")).id
    for name in ("ft:' OR 1=1 --", "ft:" + "x" * 5000, "ft:\u00e9\u4e2d:%_", "ft:a\x00b", ""):
        assert await storage.fine_tuned_models.get(acme, name) is None
        assert await storage.fine_tuned_models.delete(acme, name) is None
