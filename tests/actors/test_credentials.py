"""The credential bookkeeping actors, on real storage, with Trio's clock driven by the test."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from actors.credentials import CredentialEpochWatcher, LastUsedRecorder
from protocol.credentials import CredentialHasher, CredentialKind
from storage.open import Storage
from tests.waiting import wait_until


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


# With the mock clock, asyncio's timeouts inside asyncpg (on trio-asyncio) fire at once, so
# clock-driven tests use SQLite; the repository calls they make run on both backends elsewhere.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])


async def _key(storage: Storage, name: str = "k") -> str:
    org = await storage.orgs.create(f"org-{name}")
    credential = CredentialHasher(b"p" * 32).generate(CredentialKind.SECRET)
    record = await storage.keys.create(org.id, credential, {"name": name})
    return record.id


async def _last_used(storage: Storage, key_id: str) -> int | None:
    value = await storage.db.fetchval(
        "SELECT last_used_at FROM api_keys WHERE id = :id", {"id": key_id}
    )
    return None if value is None else int(value)


@sqlite_only
async def test_recorder_batches_notes_and_flushes_each_interval(
    storage: Storage, autojump_clock: trio.testing.MockClock
) -> None:
    key_id = await _key(storage)
    recorder = LastUsedRecorder(storage.keys, interval=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        recorder.note(key_id, 100)
        recorder.note(key_id, 300)
        recorder.note(key_id, 200)  # older than the latest: ignored
        await trio.sleep(0.5)
        # Nothing written yet. (Not checked by reading the row: while that read waits on a
        # database thread the autojump clock would run to the flush.)
        assert recorder.flushes == 0
        await trio.sleep(0.5)
        # The write runs on a database thread, which the mock clock cannot see: while it runs
        # every task looks blocked and autojump would race the clock past any deadline. So
        # from here the clock follows real time, and the wait is a real one.
        autojump_clock.autojump_threshold = math.inf
        autojump_clock.rate = 1.0
        await wait_until(lambda: recorder.flushes == 1)
        assert await _last_used(storage, key_id) == 300
        nursery.cancel_scope.cancel()


@sqlite_only
async def test_recorder_flushes_what_is_left_when_stopped(
    storage: Storage, autojump_clock: trio.testing.MockClock
) -> None:
    key_id = await _key(storage)
    recorder = LastUsedRecorder(storage.keys, interval=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        recorder.note(key_id, 42)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert await _last_used(storage, key_id) == 42


async def test_recorder_drops_notes_when_its_inbox_is_full(storage: Storage) -> None:
    recorder = LastUsedRecorder(storage.keys, capacity=2)
    for i in range(5):
        recorder.note(f"key_{i}", i)
    assert recorder.dropped == 3
    assert recorder.inbox_depth() == 2


async def test_recorder_never_moves_last_used_back(storage: Storage) -> None:
    key_id = await _key(storage)
    await storage.keys.record_last_used({key_id: 500})
    await storage.keys.record_last_used({key_id: 400})
    assert await _last_used(storage, key_id) == 500


@sqlite_only
async def test_epoch_watcher_calls_back_when_a_key_changes(
    storage: Storage, autojump_clock: trio.testing.MockClock
) -> None:
    key_id = await _key(storage)
    org_id = await storage.db.fetchval("SELECT org_id FROM api_keys WHERE id = :id", {"id": key_id})
    changes: list[float] = []
    watcher = CredentialEpochWatcher(
        storage.keys, lambda: changes.append(trio.current_time()), interval=1.0
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(watcher.run)
        await trio.sleep(2.5)
        assert changes == []
        # The watcher's reads run on a database thread the mock clock cannot see: autojump
        # would race the clock past the wait's deadline while one runs. From here the clock
        # follows real time (the watcher polls once a second).
        autojump_clock.autojump_threshold = math.inf
        autojump_clock.rate = 1.0
        await storage.keys.update(org_id, key_id, {"is_active": False})
        await wait_until(lambda: len(changes) == 1)
        await storage.keys.delete(org_id, key_id)
        await wait_until(lambda: len(changes) == 2)
        assert watcher.statistics()["changes_seen"] == 2
        nursery.cancel_scope.cancel()
