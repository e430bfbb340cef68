"""The dispatcher: one per instance; holds subscription leases and runs their delivery actors.

It is a `Supervisor` (named "webhooks") whose children are the delivery actors, one per enabled
subscription whose lease this instance holds, named `webhook:<id>`, so `/v1/admin/actors` shows
each with its numbers. Every `poll_interval_s` it

- lists the enabled subscriptions and claims each (`claim` takes a free or expired lease and
  renews one held) — a new one at once, the others every third of the lease TTL, so a held
  lease is renewed twice before it could expire and an expired one elsewhere is taken within
  4/3 of the TTL — starts an actor for each newly held one and stops the actors of those lost,
  disabled or deleted;
- asks which orgs have outbox events past the position it last saw and wakes their actors;
- every `stats_interval_s`, reads the queue depths for the statistics.

A failing poll (the database away) is logged and retried at the next interval; the actors keep
going on their own and stop when their writes find the lease gone. On stop, the leases held are
released (shielded, bounded) so another instance takes over at once instead of after the TTL.

`owner` is unique per process start: a restarted process never mistakes an older lease of its
predecessor for its own.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket

import trio

from actors.supervisor import RestartPolicy, Supervisor
from actors.webhooks.clock import WallClock
from actors.webhooks.delivery import WebhookDelivery, actor_name
from actors.webhooks.metrics import DeliveryMetrics
from actors.webhooks.sender import WebhookSender
from actors.webhooks.settings import WebhookSettings
from protocol.secretbox import SecretBox
from storage.webhooks import QueueStats, WebhookRepository

_log = logging.getLogger("gateway.webhooks")

_ORG_LIMIT = 1000
_RELEASE_TIMEOUT_S = 5.0
# A delivery actor only crashes on storage errors: retry calmly.
_POLICY = RestartPolicy(initial_backoff=1.0, max_backoff=60.0)


def new_owner() -> str:
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(8)}"


class WebhookDispatcher(Supervisor):
    kind = "supervisor"

    def __init__(
        self,
        repo: WebhookRepository,
        box: SecretBox,
        settings: WebhookSettings,
        *,
        sender: WebhookSender | None = None,
        clock: WallClock | None = None,
        owner: str | None = None,
        name: str = "webhooks",
    ) -> None:
        super().__init__(name, default_policy=_POLICY)
        self.repo = repo
        self.settings = settings
        self.owner = owner or new_owner()
        self.metrics = DeliveryMetrics()
        self.sender = sender or WebhookSender(
            allowed_networks=settings.allowed_private_networks,
            allow_http=settings.allow_http,
            allowed_ports=settings.allowed_ports,
            attempt_timeout_s=settings.attempt_timeout_s,
            ssl_context=settings.ssl_context,
        )
        self._box = box
        self.clock = clock or WallClock()
        self._held: dict[str, str] = {}  # webhook id -> org id, leases held after the last poll
        self._tried: dict[str, float] = {}  # webhook id -> Trio time of the last claim
        self._position: tuple[int, int] | None = None
        self._queues: dict[str, QueueStats] = {}
        self._stats_due = 0.0
        self.polls = 0
        self.poll_errors = 0

    # -- for the API and the runtime --------------------------------------------------

    def wake(self, webhook_id: str) -> bool:
        """Make the subscription's actor look at its queue now (after a test event or a
        redelivery). False when this instance does not run it (another one will, by its poll)."""
        actor = self.get(actor_name(webhook_id))
        if isinstance(actor, WebhookDelivery):
            actor.wake()
            return True
        return False

    def held(self) -> dict[str, str]:
        """Webhook id -> org id of the subscriptions this instance delivers."""
        return dict(self._held)

    def subscription_stats(self) -> dict[str, dict[str, object]]:
        """Per subscription delivered here: its queue and its last attempt."""
        found: dict[str, dict[str, object]] = {}
        for webhook_id in self._held:
            actor = self.get(actor_name(webhook_id))
            if isinstance(actor, WebhookDelivery):
                stats = actor.statistics()
                queue = self._queues.get(webhook_id)
                stats["oldest_pending_created_at"] = (
                    queue.oldest_pending_created_at if queue else None
                )
                found[webhook_id] = stats
        return found

    def statistics(self) -> dict[str, object]:
        return {
            **super().statistics(),
            "held": len(self._held),
            "polls": self.polls,
            "poll_errors": self.poll_errors,
            **{f"attempts_{k}": v for k, v in self.metrics.snapshot().items()},
        }

    # -- the loop ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(super().run)  # the children's nursery
                task_status.started()
                while True:
                    try:
                        await self.poll()
                    except Exception as exc:  # storage away: try again next interval
                        self.poll_errors += 1
                        _log.warning("webhook dispatcher poll failed: %s", type(exc).__name__)
                    await trio.sleep(self.settings.poll_interval_s)
        finally:
            await self._release_all()

    async def poll(self) -> None:
        """One round: leases, actors, wakes, statistics."""
        repo, clock = self.repo, self.clock
        self.polls += 1
        ttl_us = round(self.settings.lease_ttl_s * 1_000_000)
        now = trio.current_time()
        every = self.settings.lease_ttl_s / 3
        # An actor that retired (its lease lost, say) is claimed again now, not at renewal.
        held: dict[str, str] = {}
        tried: dict[str, float] = {}
        for webhook_id, org_id in await repo.enabled():
            last = self._tried.get(webhook_id)
            retired = webhook_id in self._held and self.get(actor_name(webhook_id)) is None
            if last is not None and now - last < every and not retired:
                tried[webhook_id] = last
                if webhook_id in self._held:
                    held[webhook_id] = org_id
                continue
            tried[webhook_id] = now
            if await repo.claim(webhook_id, self.owner, clock.now_us(), ttl_us):
                held[webhook_id] = org_id
        self._tried = tried
        for webhook_id in list(self._held):
            if webhook_id not in held:
                await self.stop(actor_name(webhook_id))
        self._held = held
        for webhook_id, org_id in held.items():
            if self.get(actor_name(webhook_id)) is None:
                self.start_soon(self._actor(webhook_id, org_id))
        await self._wake_orgs()
        if trio.current_time() >= self._stats_due:
            self._stats_due = trio.current_time() + self.settings.stats_interval_s
            self._queues = {q.webhook_id: q for q in await repo.queue_stats()}
            for webhook_id, queue in self._queues.items():
                actor = self.get(actor_name(webhook_id))
                if isinstance(actor, WebhookDelivery):
                    actor.pending = queue.pending

    async def _wake_orgs(self) -> None:
        """Wake the actors of orgs with new outbox events. Only the held subscriptions' orgs
        are read (an instance holding none reads nothing: the hot path's batches of
        completion events cost it no scan)."""
        if not self._held:
            self._position = None
            return
        if self._position is None:
            self._position = await self.repo.outbox_head()
            return  # every actor fills its queue as it starts
        orgs, self._position = await self.repo.orgs_with_events_after(
            self._position, limit=_ORG_LIMIT, orgs=set(self._held.values())
        )
        if not orgs:
            return
        for webhook_id, org_id in self._held.items():
            if org_id in orgs:
                self.wake(webhook_id)

    def _actor(self, webhook_id: str, org_id: str) -> WebhookDelivery:
        return WebhookDelivery(
            self.repo,
            webhook_id,
            org_id,
            owner=self.owner,
            box=self._box,
            sender=self.sender,
            clock=self.clock,
            lease_ttl_s=self.settings.lease_ttl_s,
            idle_poll_s=self.settings.idle_poll_s,
            metrics=self.metrics,
        )

    async def _release_all(self) -> None:
        held, self._held, self._tried = list(self._held), {}, {}
        with trio.move_on_after(_RELEASE_TIMEOUT_S, shield=True):
            for webhook_id in held:
                try:
                    await self.repo.release(webhook_id, self.owner)
                except Exception as exc:  # the lease then simply expires
                    _log.warning("webhook lease release failed: %s", type(exc).__name__)
