"""The dispatcher on real storage (both backends) with a real HTTPS receiver, in real time with
a short poll: leases, one actor per held subscription in the supervision tree, wakes from the
outbox and from the API, stopping actors of disabled subscriptions, releasing leases on stop,
and the counters."""

from __future__ import annotations

from dataclasses import replace

import pytest
import trio

from actors.supervisor import Supervisor
from actors.webhooks import WebhookSettings
from actors.webhooks.clock import WallClock
from actors.webhooks.dispatcher import WebhookDispatcher
from storage.open import Storage
from tests.actors.webhooks.support import BOX, LOOPBACK, emit, event_ids, sender, subscribe
from tests.waiting import wait_until
from tests.webhook_receiver import Receiver, ReceiverTLS, response

pytestmark = pytest.mark.storage

# The idle poll is long: an event delivered within seconds was delivered because of a wake.
SETTINGS = WebhookSettings(
    allowed_private_networks=LOOPBACK,
    poll_interval_s=0.05,
    lease_ttl_s=15.0,
    idle_poll_s=3600.0,
    stats_interval_s=0.05,
)


def dispatcher(storage: Storage, tls: ReceiverTLS) -> WebhookDispatcher:
    return WebhookDispatcher(storage.webhooks, BOX, SETTINGS, sender=sender(tls), clock=WallClock())


async def test_held_subscriptions_get_an_actor_in_the_tree_and_their_events(
    storage: Storage, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    other_org = await storage.orgs.create("other")
    mine = await subscribe(storage, org, receiver.url)
    theirs = await subscribe(storage, other_org, receiver.url)
    taken = await subscribe(storage, org, receiver.url)
    now = WallClock().now_us()
    assert await storage.webhooks.claim(taken.id, "another-instance", now, 60_000_000)
    root = Supervisor()
    hub = dispatcher(storage, tls)
    async with trio.open_nursery() as nursery:
        await nursery.start(root.run)
        await root.start(hub)
        await wait_until(lambda: set(hub.held()) == {mine.id, theirs.id})
        await wait_until(lambda: len(hub.children()) == 2)
        [node] = root.snapshot().children
        assert (node.name, node.type) == ("webhooks", "WebhookDispatcher")
        names = {child.name for child in node.children}
        assert names == {f"webhook:{mine.id}", f"webhook:{theirs.id}"}
        # Written after the actors went idle (their idle poll is an hour): the outbox wake.
        first = await emit(storage, org, "key.created")
        with trio.fail_after(10):
            await receiver.wait_for(1)
        await trio.sleep(0.3)  # the other org's subscription and the one held elsewhere: none
        nursery.cancel_scope.cancel()
    assert event_ids(receiver.arrivals) == [first]


async def test_wake_delivers_a_test_event_and_counters_count(
    storage: Storage, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url)
    receiver.play(response(400))
    hub = dispatcher(storage, tls)
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.run)
        await wait_until(lambda: hub.get(f"webhook:{hook.id}") is not None)
        rejected, _ = await storage.webhooks.append_test_event(
            org.id, hook.id, "key.created", {"test": True}
        )
        assert hub.wake(hook.id)
        accepted, _ = await storage.webhooks.append_test_event(
            org.id, hook.id, "key.created", {"test": True}
        )
        assert hub.wake(hook.id)
        with trio.fail_after(10):
            arrivals = await receiver.wait_for(2)
        await wait_until(lambda: hub.metrics.attempts["delivered"] == 1)
        await wait_until(lambda: hub.subscription_stats()[hook.id]["pending"] == 0)
        stats = hub.subscription_stats()[hook.id]
        nursery.cancel_scope.cancel()
    assert event_ids(arrivals) == [rejected, accepted]
    assert dict(hub.metrics.attempts) == {"delivered": 1, "failed": 1, "retry": 0, "dropped": 0}
    assert (stats["attempts"], stats["last_result"], stats["last_status_code"]) == (
        2,
        "delivered",
        200,
    )
    assert hub.statistics()["attempts_failed"] == 1.0
    assert not hub.wake("whk_not_here")


async def test_a_disabled_subscription_loses_its_actor_and_leases_are_released_on_stop(
    storage: Storage, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    kept = await subscribe(storage, org, receiver.url)
    dropped = await subscribe(storage, org, receiver.url)
    hub = dispatcher(storage, tls)
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.run)
        await wait_until(lambda: len(hub.children()) == 2)
        now = WallClock().now_us()
        await storage.webhooks.update(org.id, dropped.id, now, enabled=False)
        await wait_until(lambda: [a.name for a in hub.children()] == [f"webhook:{kept.id}"])
        assert not await storage.webhooks.claim(kept.id, "another-instance", now, 1_000_000)
        nursery.cancel_scope.cancel()
    # Released, not left to expire: another instance takes it at once.
    assert await storage.webhooks.claim(kept.id, "another-instance", now, 1_000_000)


async def test_two_dispatchers_never_run_the_same_subscription(
    storage: Storage, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hooks = [await subscribe(storage, org, receiver.url) for _ in range(3)]
    first, second = dispatcher(storage, tls), dispatcher(storage, tls)
    assert first.owner != second.owner
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        await nursery.start(second.run)
        await wait_until(lambda: len(first.held()) + len(second.held()) == 3)
        assert not set(first.held()) & set(second.held())
        await trio.sleep(0.3)  # several polls: renewals, no flapping
        assert len(first.held()) + len(second.held()) == 3
        await emit(storage, org, "key.created")
        with trio.fail_after(10):
            await receiver.wait_for(3)
        await trio.sleep(0.2)
        assert len(receiver.arrivals) == 3  # once per subscription
        held_by_first = set(first.held())
        nursery.cancel_scope.cancel()
    assert {h.id for h in hooks} >= held_by_first


async def test_an_expired_lease_of_another_instance_is_taken_over(
    storage: Storage, tls: ReceiverTLS, receiver: Receiver
) -> None:
    org = await storage.orgs.create("acme")
    hook = await subscribe(storage, org, receiver.url)
    clock = WallClock()
    # Another instance took it and then went silent: its lease runs out after 0.5 s.
    assert await storage.webhooks.claim(hook.id, "silent-instance", clock.now_us(), 500_000)
    settings = replace(SETTINGS, lease_ttl_s=0.6)
    hub = WebhookDispatcher(storage.webhooks, BOX, settings, sender=sender(tls), clock=clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.run)
        await trio.sleep(0.3)
        assert hub.held() == {}  # not while it is valid
        await wait_until(lambda: hub.get(f"webhook:{hook.id}") is not None)
        nursery.cancel_scope.cancel()
    assert hub.held() == {}  # released on stop
