"""The console's session store over a real database (both backends), with a clock the test
moves: idle and absolute expiry, the throttled last-seen write, the purge at sign-in, the
flash messages sealed under the session id, and the CSRF token that is never stored."""

from __future__ import annotations

import pytest

from gateway.console.sessions import Session, SessionStore, csrf_token
from storage.open import Storage

pytestmark = pytest.mark.storage


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # wall-clock seconds

    def __call__(self) -> float:
        return self.now


def _session() -> Session:
    return Session(operator=False, org_id="org_a", key_hash="h", label="a")


def _store(storage: Storage, clock: Clock) -> SessionStore:
    return SessionStore(storage.console_sessions, idle_s=600, max_age_s=3000, clock=clock)


async def test_sessions_end_when_idle_or_too_old(storage: Storage) -> None:
    clock = Clock()
    store = _store(storage, clock)
    sid = await store.create(_session())
    assert await store.get(sid) is not None
    for _ in range(5):
        clock.now += 590  # within the idle limit each time: the idle clock restarts
        assert await store.get(sid) is not None
    clock.now += 590  # 3540 s after sign-in: too old however active
    assert await store.get(sid) is None
    assert await storage.console_sessions.count() == 0  # the expired row went on read
    idle = await store.create(_session())
    clock.now += 601
    assert await store.get(idle) is None
    for hostile in (None, "", "x" * 500, "\udcff" * 10, "' OR 1=1 --", sid):
        assert await store.get(hostile) is None
        await store.end(hostile)


async def test_last_seen_is_written_at_most_once_a_minute(storage: Storage) -> None:
    clock = Clock()
    store = SessionStore(storage.console_sessions, idle_s=600, touch_s=60, clock=clock)
    sid = await store.create(_session())
    created = clock.now

    async def seen() -> float:
        (row,) = [await storage.console_sessions.get(h) for h in await _hashes(storage)]
        assert row is not None
        return row.seen_at / 1e6

    clock.now += 59
    assert await store.get(sid) is not None
    assert await seen() == created  # not written: less than a minute since
    clock.now += 2
    assert await store.get(sid) is not None
    assert await seen() == clock.now
    # The lag is bounded by touch_s: 599 s after the last write it is still live.
    clock.now += 599
    assert await store.get(sid) is not None


async def _hashes(storage: Storage) -> list[str]:
    rows = await storage.db.fetch("SELECT id_hash FROM console_sessions")
    return [r["id_hash"] for r in rows]


async def test_sign_in_purges_expired_sessions(storage: Storage) -> None:
    clock = Clock()
    store = _store(storage, clock)
    for _ in range(3):
        await store.create(_session())
    clock.now += 601
    live = await store.create(_session())
    assert await storage.console_sessions.count() == 1
    assert await store.get(live) is not None


async def test_ids_are_unguessable_and_only_their_hash_is_stored(storage: Storage) -> None:
    store = _store(storage, Clock())
    ids = [await store.create(_session()) for _ in range(20)]
    assert len(set(ids)) == 20 and all(len(i) >= 40 for i in ids)
    dump = repr(await storage.db.fetch("SELECT * FROM console_sessions"))
    for sid in ids:
        assert sid not in dump
        assert csrf_token(sid) not in dump
    one = await store.get(ids[0])
    assert one is not None and one.csrf == csrf_token(ids[0]) != csrf_token(ids[1])
    await store.end(ids[0])
    assert await store.get(ids[0]) is None and await store.get(ids[1]) is not None


async def test_an_operator_session_keeps_its_key_fingerprint(storage: Storage) -> None:
    store = _store(storage, Clock())
    sid = await store.create(
        Session(operator=True, org_id=None, key_hash=None, label="operator", operator_key="f" * 12)
    )
    got = await store.get(sid)
    assert got is not None and got.operator and got.operator_key == "f" * 12
    org = await store.get(await store.create(_session()))
    assert org is not None and not org.operator and org.operator_key is None


async def test_flash_crosses_requests_sealed_and_is_shown_once(storage: Storage) -> None:
    store = _store(storage, Clock())
    sid = await store.create(_session())
    secret = "service_sk_shown-once-0123456789"
    first = await store.get(sid)
    assert first is not None
    await store.add_flash(sid, first, "secret", f"name\0{secret}")
    # A second request of the same session, read before the first added its message,
    # adds its own: neither is lost.
    stale = await store.get(sid)
    assert stale is not None
    stale.flash, stale.flash_box = [], ""
    await store.add_flash(sid, stale, "info", "Key disabled.")
    dump = repr(await storage.db.fetch("SELECT * FROM console_sessions"))
    assert secret not in dump and "Key disabled" not in dump
    later = await store.get(sid)  # another instance, say
    assert later is not None
    assert await store.take_flash(sid, later) == [
        ("secret", f"name\0{secret}"),
        ("info", "Key disabled."),
    ]
    again = await store.get(sid)
    assert again is not None and again.flash == []
    assert await store.take_flash(sid, again) == []


async def test_flash_of_another_session_does_not_open(storage: Storage) -> None:
    store = _store(storage, Clock())
    mine, theirs = await store.create(_session()), await store.create(_session())
    session = await store.get(theirs)
    assert session is not None
    await store.add_flash(theirs, session, "secret", "theirs")
    boxes = {
        r["id_hash"]: r["flash_box"]
        for r in await storage.db.fetch("SELECT id_hash, flash_box FROM console_sessions")
    }
    box = next(b for b in boxes.values() if b)
    mine_hash = next(h for h, b in boxes.items() if not b)
    assert await storage.console_sessions.swap_flash(mine_hash, "", box)  # copied across
    copied = await store.get(mine)
    assert copied is not None and copied.flash == []
    assert await store.take_flash(mine, copied) == []  # and the unreadable box is dropped
