"""ConsoleSessionRepository (migration 0025): rows by id hash, the conditional last-seen
update, the compare-and-set of flash messages, sign-out and the purge by age."""

from __future__ import annotations

import pytest

from storage.console_sessions import StoredSession
from storage.open import Storage

pytestmark = pytest.mark.storage

T0 = 1_800_000_000_000_000  # µs


def _row(
    id_hash: str, *, created: int = T0, seen: int = T0, operator: bool = False
) -> StoredSession:
    return StoredSession(
        id_hash=id_hash,
        operator_key="a1b2c3d4e5f6" if operator else None,
        org_id=None if operator else "org_1",
        key_hash=None if operator else "hash-of-key",
        label="operator" if operator else "acme ünïcode 'quoted'",
        flash_box="",
        created_at=created,
        seen_at=seen,
    )


async def test_a_session_is_stored_and_read_back_by_its_hash(storage: Storage) -> None:
    repo = storage.console_sessions
    assert await repo.get("0" * 64) is None
    org, op = _row("a" * 64), _row("b" * 64, operator=True)
    await repo.create(org)
    await repo.create(op)
    assert await repo.get("a" * 64) == org
    assert await repo.get("b" * 64) == op
    assert await repo.get("A" * 64) is None  # exact match only
    assert await repo.get("a" * 63) is None
    assert await repo.count() == 2


async def test_last_seen_moves_forward_only_when_stale(storage: Storage) -> None:
    repo = storage.console_sessions
    await repo.create(_row("a" * 64))
    # Another request already wrote a time at or after the threshold: nothing is written.
    assert not await repo.touch("a" * 64, T0 + 30, unless_since=T0)
    assert await repo.touch("a" * 64, T0 + 90, unless_since=T0 + 30)
    stored = await repo.get("a" * 64)
    assert stored is not None and stored.seen_at == T0 + 90 and stored.created_at == T0
    assert not await repo.touch("a" * 64, T0 + 100, unless_since=T0 + 40)
    assert not await repo.touch("missing", T0 + 100, unless_since=T0 + 99)


async def test_flash_is_swapped_only_from_what_was_read(storage: Storage) -> None:
    repo = storage.console_sessions
    await repo.create(_row("a" * 64))
    assert await repo.swap_flash("a" * 64, "", "v1:first")
    assert not await repo.swap_flash("a" * 64, "", "v1:lost")  # read before the first swap
    assert await repo.swap_flash("a" * 64, "v1:first", "v1:second")
    stored = await repo.get("a" * 64)
    assert stored is not None and stored.flash_box == "v1:second"
    assert await repo.swap_flash("a" * 64, "v1:second", "")
    assert not await repo.swap_flash("missing", "", "v1:x")


async def test_end_deletes_one_session(storage: Storage) -> None:
    repo = storage.console_sessions
    await repo.create(_row("a" * 64))
    await repo.create(_row("b" * 64))
    assert await repo.end("a" * 64)
    assert not await repo.end("a" * 64)
    assert await repo.get("a" * 64) is None and await repo.get("b" * 64) is not None


async def test_purge_deletes_idle_and_too_old_sessions_only(storage: Storage) -> None:
    repo = storage.console_sessions
    await repo.create(_row("fresh".ljust(64, "0"), created=T0, seen=T0 + 500))
    await repo.create(_row("idle".ljust(64, "0"), created=T0, seen=T0 + 99))
    await repo.create(_row("old".ljust(64, "0"), created=T0 - 1, seen=T0 + 500))
    await repo.create(_row("edge".ljust(64, "0"), created=T0, seen=T0 + 100))
    assert await repo.purge(seen_before=T0 + 100, created_before=T0) == 2
    left = {h for h in ("fresh", "idle", "old", "edge") if await repo.get(h.ljust(64, "0"))}
    assert left == {"fresh", "edge"}
    assert await repo.purge(seen_before=T0 + 100, created_before=T0) == 0
