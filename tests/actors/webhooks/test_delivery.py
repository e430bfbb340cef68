"""The delivery actor on real storage (both backends) against a real HTTPS receiver, with
Trio's MockClock driving retries: order, the retry schedule to the second, permanent and
retried statuses, Retry-After, dual signatures while a rotation overlaps, a lost lease, and
two subscriptions in parallel.

The MockClock does not autojump: database calls wait on threads (SQLite) and sockets
(PostgreSQL, whose asyncpg timers run on Trio's clock too), and an autojump would move time
during such a wait — to asyncpg's 300 s idle-connection timer, say. `drive` moves it instead,
and only while the actor sleeps, exactly to the time it sleeps until: what the actor computes
is what the receiver sees, to the microsecond."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from collections.abc import Callable
from functools import partial

import pytest
import trio
import trio.testing

from actors.webhooks.clock import WallClock
from actors.webhooks.delivery import WebhookDelivery
from actors.webhooks.secrets import secret_context
from storage.open import Storage
from storage.webhooks import CANCELLED, DELIVERED, DISABLED_FAILING, DROPPED, FAILED, Webhook
from tests.actors.webhooks.conftest import start_receiver
from tests.actors.webhooks.support import (
    BOX,
    delivery,
    emit,
    event_ids,
    signatures,
    subscribe,
    verify,
)
from tests.webhook_receiver import HANG, OK, Arrival, Receiver, ReceiverTLS, Stream, response

pytestmark = pytest.mark.storage

OWNER = "test-owner"


async def real_pause() -> None:
    """Let threads and sockets make progress without moving the MockClock."""
    await trio.to_thread.run_sync(time.sleep, 0.002)


async def drive(
    clock: trio.testing.MockClock, actor: WebhookDelivery, predicate: Callable[[], bool]
) -> None:
    """Until `predicate()`, within 30 s of real time: whenever the actor sleeps (a retry, or
    an idle queue), jump the clock to the time it sleeps until."""
    limit = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < limit, "condition never met"
        if actor.asleep_until is not None:
            clock.jump(max(0.0, actor.asleep_until - trio.current_time()))
        await real_pause()


def arrived(receiver: Receiver, count: int) -> Callable[[], bool]:
    return lambda: len(receiver.arrivals) >= count


async def outbox_readable(storage: Storage) -> None:
    """On PostgreSQL, wait (in real time) until the events written so far are behind the
    horizon fill_queue reads up to (see tests/storage/webhooks_support.py `readable`)."""
    if storage.db.dialect != "postgresql":
        return
    query = (
        "SELECT COALESCE(MAX(txid), 0) < pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
        " FROM events"
    )
    limit = time.monotonic() + 30
    while not await storage.db.fetchval(query):
        assert time.monotonic() < limit
        await real_pause()


async def until(predicate: Callable[[], bool]) -> None:
    """Poll, in real time (no MockClock), state an actor changes."""
    with trio.fail_after(30):
        while not predicate():  # noqa: ASYNC110 - state of an actor: nothing to wait on
            await trio.sleep(0.01)


def gaps(arrivals: list[Arrival]) -> list[float]:
    return [round(b.at - a.at, 3) for a, b in itertools.pairwise(arrivals)]


async def log(storage: Storage, hook: Webhook) -> list[tuple[str, str, int]]:
    """(event id, status, attempts) oldest first."""
    page = await storage.webhooks.deliveries(hook.org_id, hook.id, limit=100, after=None)
    return [(d.event_id, d.status, len(a)) for d, a in reversed(page.items)]


async def claimed(storage: Storage, hook: Webhook, clock: WallClock) -> None:
    assert await storage.webhooks.claim(hook.id, OWNER, clock.now_us(), 10**13)


async def test_events_go_out_in_order_one_at_a_time_signed_per_spec(
    storage: Storage, mock_clock: trio.testing.MockClock, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url, secret="whsec_test")
    ids = [await emit(storage, org, "key.created", n=n) for n in range(3)]
    gates = [trio.Event() for _ in ids]  # each answer waits until the test opens its gate
    receiver.play(*(Stream(partial(iter, [gate, OK])) for gate in gates))
    clock = WallClock()
    await claimed(storage, hook, clock)
    actor = delivery(storage, hook, tls, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        for n, gate in enumerate(gates, 1):
            await drive(mock_clock, actor, arrived(receiver, n))
            for _ in range(20):
                await real_pause()  # time enough for a next request to show if one were sent
            assert len(receiver.arrivals) == n  # the next waits for this answer
            gate.set()
        await drive(mock_clock, actor, lambda: actor.attempts == 3)
        nursery.cancel_scope.cancel()
    arrivals = receiver.arrivals
    assert event_ids(arrivals) == ids
    assert receiver.connections == 3  # one connection per attempt, never pooled
    first = arrivals[0]
    envelope = json.loads(first.body)
    assert set(envelope) == {"id", "type", "created_at", "data"}
    assert (envelope["type"], envelope["data"]) == ("key.created", {"n": 0})
    assert first.header("Service-Webhook-Id") == ids[0]
    assert first.header("Service-Webhook-Event") == "key.created"
    assert first.header("Content-Type") == "application/json"
    timestamp = int(first.header("Service-Webhook-Timestamp") or "0")
    assert abs(timestamp - clock.now_s()) < 60
    assert verify("whsec_test", first) and not verify("whsec_other", first)
    assert signatures(first) == 1
    assert await log(storage, hook) == [(i, DELIVERED, 1) for i in ids]
    assert (actor.delivered, actor.last_result, actor.last_status_code) == (3, DELIVERED, 200)


async def test_a_failing_event_is_retried_on_schedule_then_dropped_and_the_hook_disabled(
    storage: Storage, mock_clock: trio.testing.MockClock, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url)
    first = await emit(storage, org, "key.created")
    second = await emit(storage, org, "key.deleted")
    receiver.default = response(500, b"down")
    clock = WallClock()
    await claimed(storage, hook, clock)
    actor = delivery(storage, hook, tls, clock)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)  # returns by itself: the subscription was disabled
        await drive(mock_clock, actor, lambda: actor.stopped_because is not None)
    assert actor.stopped_because is not None and "dropped" in actor.stopped_because
    arrivals = receiver.arrivals
    assert event_ids(arrivals) == [first] * 7  # the second event waited behind it, then went
    assert gaps(arrivals) == [10, 60, 600, 3600, 6 * 3600, 24 * 3600]
    assert {a.body for a in arrivals} == {arrivals[0].body}  # the same bytes every time
    assert await log(storage, hook) == [(first, DROPPED, 7), (second, CANCELLED, 0)]
    stored = await storage.webhooks.by_id(hook.id)
    assert stored is not None and not stored.enabled
    assert stored.disabled_reason == DISABLED_FAILING
    page = await storage.webhooks.deliveries(org.id, hook.id, limit=10, after=None)
    attempts = next(a for d, a in page.items if d.event_id == first)
    assert {(a.status_code, a.outcome) for a in attempts} == {(500, "retry")}


async def test_a_4xx_is_permanent_and_the_next_event_goes_on(
    storage: Storage, mock_clock: trio.testing.MockClock, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url)
    ids = [await emit(storage, org, "key.created", n=n) for n in range(2)]
    receiver.play(response(400, b"bad"))
    clock = WallClock()
    await claimed(storage, hook, clock)
    actor = delivery(storage, hook, tls, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        await drive(mock_clock, actor, lambda: actor.attempts == 2)
        arrivals = receiver.arrivals
        nursery.cancel_scope.cancel()
    assert event_ids(arrivals) == ids
    assert gaps(arrivals)[0] < 10  # no retry wait
    assert await log(storage, hook) == [(ids[0], FAILED, 1), (ids[1], DELIVERED, 1)]


@pytest.mark.parametrize("status", [408, 429, 503])
async def test_retryable_statuses_are_retried_after_10_s(
    storage: Storage,
    mock_clock: trio.testing.MockClock,
    tls: ReceiverTLS,
    receiver: Receiver,
    status: int,
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url)
    ids = [await emit(storage, org, "key.created", n=n) for n in range(2)]
    receiver.play(response(status))
    clock = WallClock()
    await claimed(storage, hook, clock)
    actor = delivery(storage, hook, tls, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        await drive(mock_clock, actor, lambda: actor.attempts == 3)
        arrivals = receiver.arrivals
        nursery.cancel_scope.cancel()
    assert event_ids(arrivals) == [ids[0], ids[0], ids[1]]
    assert gaps(arrivals)[0] == 10
    assert await log(storage, hook) == [(ids[0], DELIVERED, 2), (ids[1], DELIVERED, 1)]


async def test_a_longer_retry_after_is_honoured_a_shorter_one_is_not(
    storage: Storage, mock_clock: trio.testing.MockClock, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url)
    await emit(storage, org, "key.created")
    receiver.play(
        response(503, extra="Retry-After: 120\r\n"),  # longer than 10 s: wins
        response(429, extra="Retry-After: 5\r\n"),  # shorter than 1 m: the schedule wins
    )
    clock = WallClock()
    await claimed(storage, hook, clock)
    actor = delivery(storage, hook, tls, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        await drive(mock_clock, actor, lambda: actor.attempts == 3)
        nursery.cancel_scope.cancel()
    assert gaps(receiver.arrivals) == [120, 60]


async def test_both_secrets_sign_while_a_rotation_overlaps(
    storage: Storage, mock_clock: trio.testing.MockClock, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url, secret="whsec_old")
    clock = WallClock()
    context = secret_context(org.id, hook.id)
    rotated = await storage.webhooks.rotate_secret(
        org.id,
        hook.id,
        clock.now_us(),
        secret_sealed=BOX.seal("my custom secret~", context),
        secret_hint="ret~",
        previous_secret_sealed=BOX.seal("whsec_old", context),
        previous_expires_at=clock.now_us() + 3600 * 1_000_000,
    )
    assert rotated is not None
    await emit(storage, org, "key.created")
    await claimed(storage, hook, clock)
    actor = delivery(storage, hook, tls, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        await drive(mock_clock, actor, lambda: bool(actor.asleep_until and actor.attempts))
        mock_clock.jump(3601)  # the overlap ends (while the actor sleeps: no query in flight)
        await emit(storage, org, "key.deleted")
        actor.wake()
        await drive(mock_clock, actor, lambda: actor.attempts == 2)
        during, after = receiver.arrivals
        nursery.cancel_scope.cancel()
    assert signatures(during) == 2
    header = during.header("Service-Webhook-Signature") or ""
    assert verify("my custom secret~", during) and verify("whsec_old", during)
    new_first = header.split(",")[1].removeprefix("v1=")
    t = during.header("Service-Webhook-Timestamp") or ""
    expected = hmac.new(b"my custom secret~", t.encode() + b"." + during.body, hashlib.sha256)
    assert new_first == expected.hexdigest()  # newest first
    assert signatures(after) == 1
    assert verify("my custom secret~", after) and not verify("whsec_old", after)


async def test_a_lost_lease_stops_the_actor(
    storage: Storage, mock_clock: trio.testing.MockClock, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url)
    await emit(storage, org, "key.created")
    receiver.default = response(500)
    clock = WallClock()
    await outbox_readable(storage)  # the first attempt goes out well within the 5 s lease
    assert await storage.webhooks.claim(hook.id, OWNER, clock.now_us(), 5_000_000)
    actor = delivery(storage, hook, tls, clock, lease_ttl_s=5.0)
    done = trio.Event()

    async def run() -> None:
        await actor.run()
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        # Renewed for 5 s as it was sent; the retry is due in 10 s.
        await drive(
            mock_clock, actor, lambda: actor.asleep_until is not None and actor.attempts == 1
        )
        mock_clock.jump(6)
        assert await storage.webhooks.claim(hook.id, "another-instance", clock.now_us(), 10**12)
        await drive(mock_clock, actor, done.is_set)
    assert actor.stopped_because == "lease lost"
    assert len(receiver.arrivals) == 1  # the retry was not sent by the instance that lost it


async def test_two_subscriptions_deliver_in_parallel(
    storage: Storage, tls: ReceiverTLS, receiver: Receiver
) -> None:
    # Real time here: MockClock would jump to the stuck attempt's deadline whenever the other
    # actor waits on a database thread, which is exactly the overlap this test is about.
    org = await storage.orgs.create("acme")
    receiver.default = HANG  # the first subscription's receiver never answers
    clock = WallClock()
    async with trio.open_nursery() as nursery:
        quick = await start_receiver(nursery, tls)
        stuck_hook = await subscribe(storage, org, receiver.url)
        quick_hook = await subscribe(storage, org, quick.url)
        event = await emit(storage, org, "key.created")
        stuck_actor = delivery(storage, stuck_hook, tls, clock)
        quick_actor = delivery(storage, quick_hook, tls, clock)
        for hook, actor in ((stuck_hook, stuck_actor), (quick_hook, quick_actor)):
            await claimed(storage, hook, clock)
            await nursery.start(actor.run)
        [stuck] = await receiver.wait_for(1)
        [answered] = await quick.wait_for(1)
        await until(lambda: quick_actor.delivered == 1)
        assert stuck_actor.attempts == 0  # still waiting on its receiver
        nursery.cancel_scope.cancel()
    assert event_ids([stuck, answered]) == [event, event]


async def test_an_idle_actor_picks_up_new_events_on_a_wake(
    storage: Storage, mock_clock: trio.testing.MockClock, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url, types=("key.deleted",))
    clock = WallClock()
    await claimed(storage, hook, clock)
    actor: WebhookDelivery = delivery(storage, hook, tls, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        await drive(mock_clock, actor, lambda: actor.asleep_until is not None)  # no jump
        await emit(storage, org, "key.created")  # not in the filter
        wanted = await emit(storage, org, "key.deleted")
        await outbox_readable(storage)
        assert actor.asleep_until is not None  # idle, for as long as the clock stands still
        actor.wake()
        limit = time.monotonic() + 30
        while actor.attempts < 1:  # the clock never moves here: only the wake can do it
            assert time.monotonic() < limit
            await real_pause()
        nursery.cancel_scope.cancel()
    [arrival] = receiver.arrivals
    assert event_ids([arrival]) == [wanted]


async def test_a_secret_that_does_not_open_holds_the_queue_without_spending_retries(
    storage: Storage, mock_clock: trio.testing.MockClock, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url)
    # Sealed for another subscription: the context does not match, it never opens here.
    sealed_elsewhere = BOX.seal("whsec_x", secret_context(org.id, "whk_other"))
    await storage.db.execute(
        "UPDATE webhooks SET secret_sealed = :s WHERE id = :id",
        {"s": sealed_elsewhere, "id": hook.id},
    )
    event = await emit(storage, org, "key.created")
    clock = WallClock()
    await claimed(storage, hook, clock)
    actor = delivery(storage, hook, tls, clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        await drive(mock_clock, actor, lambda: actor.last_error is not None)
        for _ in range(5):  # a few looks later, still nothing sent
            await drive(mock_clock, actor, lambda: actor.asleep_until is not None)
            mock_clock.jump(60)
            await real_pause()
        nursery.cancel_scope.cancel()
    assert actor.last_error == "the signing secret cannot be opened"
    assert receiver.connections == 0 and actor.attempts == 0
    assert await log(storage, hook) == [(event, "pending", 0)]
