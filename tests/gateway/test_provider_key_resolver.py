"""The hot-path resolver of bring-your-own-key provider keys, on every backend: cached lookups
(present and absent), expiry and invalidation, unreadable keys, and a key reported refused:
marked invalid once (one `provider_key.invalid` event however many requests report it), then
refused — or the gateway's key when the org opted in — until it is replaced."""

from __future__ import annotations

import time

import pytest
import trio
import trio.testing

from protocol.errors import APIError
from protocol.provider_keys import sealing_context
from protocol.secretbox import PROVIDER_KEYS, SecretBox
from services.provider_keys import ProviderKeyResolver
from storage.open import Storage
from storage.provider_keys import ProviderKeyRepository, SealedProviderKey

BOX = SecretBox.for_purpose(bytes(range(32)), PROVIDER_KEYS)


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock()  # stands still unless a test moves it


class CountingRepo(ProviderKeyRepository):
    """The real repository, counting reads; `gate` (when set) holds reads until it is set."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(storage.db)
        self.reads = 0
        self.gate: trio.Event | None = None

    async def for_use(self, org_id: str, provider: str) -> SealedProviderKey | None:
        self.reads += 1
        if self.gate is not None:
            await self.gate.wait()
        return await super().for_use(org_id, provider)


async def _org_with_key(storage: Storage, api_key: str = "sk-org-own-0001") -> str:
    org = await storage.orgs.create("acme")
    sealed = BOX.seal(api_key, sealing_context(org.id, "openai"))
    await storage.provider_keys.put(org.id, "openai", sealed, api_key[-4:])
    return org.id


async def _invalid_events(storage: Storage, org_id: str) -> int:
    events = await storage.events.list_for_org(org_id)
    return sum(e.type == "provider_key.invalid" for e in events)


async def test_lookup_opens_the_key_once_then_answers_from_memory(
    storage: Storage, clock: trio.testing.MockClock
) -> None:
    org_id = await _org_with_key(storage)
    repo = CountingRepo(storage)
    resolver = ProviderKeyResolver(repo, BOX, ttl=60)
    for _ in range(3):
        assert await resolver.lookup(org_id, "openai") == "sk-org-own-0001"
        assert await resolver.lookup(org_id, "anthropic") is None  # absent: cached too
    assert repo.reads == 2
    assert resolver.statistics() == {"cached": 2, "hits": 4, "misses": 2, "reports": 0}
    clock.jump(59)
    await resolver.lookup(org_id, "openai")
    assert repo.reads == 2
    clock.jump(1)  # the entry's time is up
    await resolver.lookup(org_id, "openai")
    assert repo.reads == 3


async def test_a_change_is_seen_after_forget_or_invalidate_all(storage: Storage) -> None:
    org_id = await _org_with_key(storage, "sk-first-key-aaaa")
    resolver = ProviderKeyResolver(storage.provider_keys, BOX)
    assert await resolver.lookup(org_id, "openai") == "sk-first-key-aaaa"
    sealed = BOX.seal("sk-second-key-bbb", sealing_context(org_id, "openai"))
    await storage.provider_keys.put(org_id, "openai", sealed, "bbbb")
    assert await resolver.lookup(org_id, "openai") == "sk-first-key-aaaa"  # still cached
    resolver.forget(org_id, "openai")
    assert await resolver.lookup(org_id, "openai") == "sk-second-key-bbb"
    record = (await storage.provider_keys.list(org_id))[0]
    await storage.provider_keys.delete(org_id, record.id)
    resolver.invalidate_all()
    assert await resolver.lookup(org_id, "openai") is None


async def test_a_load_that_raced_an_invalidation_is_not_cached(storage: Storage) -> None:
    org_id = await _org_with_key(storage)
    repo = CountingRepo(storage)
    resolver = ProviderKeyResolver(repo, BOX)
    repo.gate = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(resolver.lookup, org_id, "openai")
        await trio.testing.wait_all_tasks_blocked()
        resolver.invalidate_all()  # e.g. the key was deleted while the read was under way
        repo.gate.set()
    assert resolver.statistics()["cached"] == 0
    repo.gate = None
    await resolver.lookup(org_id, "openai")
    assert resolver.statistics()["cached"] == 1


async def test_a_key_that_cannot_be_opened_is_a_500_not_a_fall_back(storage: Storage) -> None:
    org = await storage.orgs.create("acme")
    other_master = SecretBox.for_purpose(bytes(32), PROVIDER_KEYS)
    sealed = other_master.seal("sk-under-another-master", sealing_context(org.id, "openai"))
    await storage.provider_keys.put(org.id, "openai", sealed, "ster")
    resolver = ProviderKeyResolver(storage.provider_keys, BOX)
    for _ in range(2):
        with pytest.raises(APIError) as caught:
            await resolver.lookup(org.id, "openai")
        assert caught.value.status == 500 and caught.value.code == "provider_key_unreadable"
        assert "'openai'" in caught.value.message
    # A ciphertext moved to another org does not open there either.
    thief = await storage.orgs.create("thief")
    await storage.provider_keys.put(
        thief.id, "openai", BOX.seal("sk-x", sealing_context(org.id, "openai")), ""
    )
    with pytest.raises(APIError):
        await ProviderKeyResolver(storage.provider_keys, BOX).lookup(thief.id, "openai")


async def test_a_burst_of_reports_marks_the_key_once_and_it_is_no_longer_used(
    storage: Storage, clock: trio.testing.MockClock
) -> None:
    org_id = await _org_with_key(storage)
    repo = CountingRepo(storage)
    resolver = ProviderKeyResolver(repo, BOX, report_interval=60)
    assert await resolver.lookup(org_id, "openai") == "sk-org-own-0001"
    other = ProviderKeyResolver(storage.provider_keys, BOX)  # another instance, key cached
    assert await other.lookup(org_id, "openai") == "sk-org-own-0001"
    written: list[bool] = []

    async def report() -> None:
        written.append(await resolver.report_invalid(org_id, "openai", status=401))

    async with trio.open_nursery() as nursery:
        for _ in range(50):
            nursery.start_soon(report)
    assert written.count(True) == 1 and len(written) == 50
    assert await _invalid_events(storage, org_id) == 1
    assert resolver.statistics()["reports"] == 1
    event = [e for e in await storage.events.list_for_org(org_id) if e.type.endswith("invalid")]
    assert event[0].data["provider"] == "openai" and event[0].data["status"] == 401
    assert "401" in event[0].data["reason"]
    # This instance forgot it at once: the key is refused, never answered again.
    for _ in range(2):
        with pytest.raises(APIError) as caught:
            await resolver.lookup(org_id, "openai")
        error = caught.value
        assert (error.status, error.code, error.type) == (
            400,
            "invalid_provider_key",
            "invalid_request_error",
        )
        assert "'openai'" in error.message and "POST /v1/provider_keys" in error.message
        assert "401" in error.message and "sk-org-own-0001" not in error.message
    # Another instance: its report marks nothing more; its cache goes with the epoch (the
    # watcher calls invalidate_all) or with its own report, whichever comes first.
    assert await other.lookup(org_id, "openai") == "sk-org-own-0001"  # still cached
    assert not await other.report_invalid(org_id, "openai", status=401)
    with pytest.raises(APIError):
        await other.lookup(org_id, "openai")
    # Past the interval, nothing more either: the key is invalid until replaced.
    clock.jump(61)
    assert not await resolver.report_invalid(org_id, "openai", status=401)
    assert await _invalid_events(storage, org_id) == 1


async def test_an_invalid_key_with_fallback_answers_the_gateways_key(storage: Storage) -> None:
    org = await storage.orgs.create("acme")
    sealed = BOX.seal("sk-org-own-0001", sealing_context(org.id, "openai"))
    await storage.provider_keys.put(org.id, "openai", sealed, "0001", fallback_to_gateway_key=True)
    resolver = ProviderKeyResolver(storage.provider_keys, BOX)
    assert await resolver.lookup(org.id, "openai") == "sk-org-own-0001"
    assert await resolver.report_invalid(org.id, "openai", status=403)
    assert await resolver.lookup(org.id, "openai") is None  # the gateway's key, billed
    assert await _invalid_events(storage, org.id) == 1


async def test_replacing_an_invalid_key_makes_it_used_again_everywhere(storage: Storage) -> None:
    org_id = await _org_with_key(storage, "sk-first-key-aaaa")
    resolver = ProviderKeyResolver(storage.provider_keys, BOX)
    other = ProviderKeyResolver(storage.provider_keys, BOX)
    assert await resolver.lookup(org_id, "openai") == "sk-first-key-aaaa"
    assert await resolver.report_invalid(org_id, "openai", status=401)
    for instance in (resolver, other):
        with pytest.raises(APIError):
            await instance.lookup(org_id, "openai")
    sealed = BOX.seal("sk-second-key-bbb", sealing_context(org_id, "openai"))
    await storage.provider_keys.put(org_id, "openai", sealed, "bbbb")
    resolver.forget(org_id, "openai")  # the route's, on the instance that took the POST
    other.invalidate_all()  # the epoch watcher's, on every other instance
    for instance in (resolver, other):
        assert await instance.lookup(org_id, "openai") == "sk-second-key-bbb"
    # The new key going bad is a new mark and a second event.
    assert await resolver.report_invalid(org_id, "openai", status=403)
    assert await _invalid_events(storage, org_id) == 2
    assert not await resolver.report_invalid(org_id, "anthropic")  # no key: nothing to mark


async def test_a_refused_old_copy_never_marks_the_key_that_replaced_it(
    storage: Storage,
) -> None:
    """A request given the old value is refused after the key was replaced and this instance's
    cache dropped (the epoch): what it reports must not mark the new value."""
    org_id = await _org_with_key(storage, "sk-first-key-aaaa")
    resolver = ProviderKeyResolver(storage.provider_keys, BOX)
    before = time.perf_counter()  # the refused request began, and was given the old value
    assert await resolver.lookup(org_id, "openai") == "sk-first-key-aaaa"
    sealed = BOX.seal("sk-second-key-bbb", sealing_context(org_id, "openai"))
    await storage.provider_keys.put(org_id, "openai", sealed, "bbbb")
    resolver.invalidate_all()
    after = time.perf_counter()
    assert await resolver.lookup(org_id, "openai") == "sk-second-key-bbb"  # a later request
    assert not await resolver.report_invalid(org_id, "openai", status=401, started=before)
    assert await _invalid_events(storage, org_id) == 0
    assert await resolver.lookup(org_id, "openai") == "sk-second-key-bbb"
    # A request that began after this instance answered the new value: that one is refused.
    assert await resolver.report_invalid(org_id, "openai", status=401, started=after + 1)
    assert await _invalid_events(storage, org_id) == 1
    # An instance that answered nothing for it has nothing to mark.
    fresh = ProviderKeyResolver(storage.provider_keys, BOX)
    assert not await fresh.report_invalid(org_id, "openai", status=401)


async def test_a_cancelled_report_is_retried_by_the_next(storage: Storage) -> None:
    org_id = await _org_with_key(storage)
    resolver = ProviderKeyResolver(storage.provider_keys, BOX)
    await resolver.lookup(org_id, "openai")
    with trio.CancelScope() as scope:
        scope.cancel()
        await resolver.report_invalid(org_id, "openai", status=401)
    assert await _invalid_events(storage, org_id) == 0
    assert await resolver.report_invalid(org_id, "openai", status=401)
