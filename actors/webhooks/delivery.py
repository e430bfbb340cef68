"""The delivery actor of one subscription: its queue, strictly in order, one event at a time.

It runs while this instance holds the subscription's lease (the dispatcher starts and stops it).
A step reads the queue's head; with none it copies the next outbox events into the queue
(`fill_queue`) and, with nothing new, waits for a wake (the dispatcher saw events for the org,
or the API queued a test event or a redelivery) or the idle poll. A head not yet due (a retry)
is slept on until its `next_attempt_at`; a wake only makes it look at the head again (a
redelivery or a change may have replaced it). A due head is sent: the lease is renewed first
(an instance that lost it sends nothing new), the secrets are opened, the envelope is built from
the stored row (the same bytes on every attempt) and the result recorded with the next due time.

A secret that does not open (a wrong master key) holds the queue without spending retries.
The actor returns — retires, is not restarted — when the lease is lost (a write or claim
answered False), the subscription is gone or disabled, or its last retry failed (it was disabled
by that). A storage error raises: the supervisor restarts it with backoff, and the head, still
pending, is tried again.
"""

from __future__ import annotations

import logging

import trio

from actors.base import Actor
from actors.webhooks.clock import WallClock
from actors.webhooks.metrics import DeliveryMetrics
from actors.webhooks.secrets import signing_secrets
from actors.webhooks.sender import AttemptResult, WebhookSender
from protocol.errors import SecretBoxError
from protocol.secretbox import SecretBox
from protocol.webhooks import (
    Outcome,
    delivery_headers,
    envelope,
    next_delay_s,
    outcome_of,
    retry_after_s,
)
from storage.webhooks import (
    DELIVERED,
    DROPPED,
    FAILED,
    PENDING,
    Attempt,
    Delivery,
    WebhookRepository,
)

_log = logging.getLogger("gateway.webhooks")

FILL_BATCH = 100
SECRET_RETRY_S = 60.0


def actor_name(webhook_id: str) -> str:
    return f"webhook:{webhook_id}"


class WebhookDelivery(Actor):
    kind = "webhook_delivery"

    def __init__(
        self,
        repo: WebhookRepository,
        webhook_id: str,
        org_id: str,
        *,
        owner: str,
        box: SecretBox,
        sender: WebhookSender,
        clock: WallClock,
        lease_ttl_s: float,
        idle_poll_s: float = 5.0,
        metrics: DeliveryMetrics | None = None,
    ) -> None:
        self.name = actor_name(webhook_id)
        self.webhook_id = webhook_id
        self.org_id = org_id
        self._repo = repo
        self._owner = owner
        self._box = box
        self._sender = sender
        self._clock = clock
        self._lease_ttl_us = round(lease_ttl_s * 1_000_000)
        self._idle_poll_s = idle_poll_s
        self._metrics = metrics if metrics is not None else DeliveryMetrics()
        self._wake = trio.Event()
        # For the admin tree and the API's stats (the dispatcher fills `pending`).
        self.pending: int | None = None
        self.attempts = 0
        self.delivered = 0
        self.last_result: str | None = None
        self.last_status_code: int | None = None
        self.last_error: str | None = None
        self.last_attempt_at: int | None = None
        self.next_attempt_at: int | None = None
        self.stopped_because: str | None = None
        self.asleep_until: float | None = None  # Trio time, while waiting for a due time or a wake

    def wake(self) -> None:
        """Look at the queue now (new outbox events, a test event, a redelivery)."""
        self._wake.set()

    def statistics(self) -> dict[str, object]:
        return {
            "webhook_id": self.webhook_id,
            "org_id": self.org_id,
            "pending": self.pending,
            "attempts": self.attempts,
            "delivered": self.delivered,
            "last_result": self.last_result,
            "last_status_code": self.last_status_code,
            "last_error": self.last_error,
            "last_attempt_at": self.last_attempt_at,
            "next_attempt_at": self.next_attempt_at,
        }

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while await self._step():
            pass

    async def _step(self) -> bool:
        """One look at the queue; False when the actor is done."""
        if self._wake.is_set():
            self._wake = trio.Event()  # consumed here: a wake from now on ends the next wait
        wake = self._wake
        head = await self._repo.head(self.webhook_id)
        if head is None:
            self.next_attempt_at = None
            now = self._clock.now_us()
            queued = await self._repo.fill_queue(
                self.webhook_id, self._owner, now, limit=FILL_BATCH
            )
            if queued < 0:
                return self._stop("lease lost")
            if queued == 0:
                await self._sleep(wake, trio.current_time() + self._idle_poll_s)
            return True
        due = head.next_attempt_at
        self.next_attempt_at = due
        if due is not None and due > self._clock.now_us():
            await self._sleep(wake, self._clock.trio_time_at(due))
            return True
        return await self._attempt(head)

    async def _sleep(self, wake: trio.Event, until: float) -> None:
        """Until the Trio time `until` or a wake. `asleep_until` says so meanwhile (the admin
        view; tests driving a MockClock by hand jump to it)."""
        self.asleep_until = until
        try:
            with trio.move_on_at(until):
                await wake.wait()
        finally:
            self.asleep_until = None

    async def _attempt(self, head: Delivery) -> bool:
        repo, clock = self._repo, self._clock
        if not await repo.claim(self.webhook_id, self._owner, clock.now_us(), self._lease_ttl_us):
            return self._stop("lease lost")
        webhook = await repo.by_id(self.webhook_id)
        if webhook is None or not webhook.enabled:
            return self._stop("subscription gone or disabled")
        started = clock.now_us()
        try:
            secrets = signing_secrets(self._box, webhook, started)
        except SecretBoxError:
            # Our side (a wrong master key, a damaged row), not the receiver's: nothing is
            # sent, no retry is spent, and the instance stays healthy. Look again later.
            self.last_error = "the signing secret cannot be opened"
            _log.error("webhook %s: its signing secret cannot be opened", self.webhook_id)
            await self._sleep(trio.Event(), trio.current_time() + SECRET_RETRY_S)
            return True
        body = envelope(head.event_id, head.event_type, head.event_created_at, head.data_json)
        timestamp = started // 1_000_000
        headers = delivery_headers(head.event_id, head.event_type, timestamp, body, secrets)
        result = await self._sender.post(webhook.url, body, headers)
        now = clock.now_us()
        status, next_at, outcome = self._judge(head, result, now)
        attempt = Attempt(
            event_id=head.event_id,
            started_at=started,
            duration_ms=round(result.duration_s * 1000),
            status_code=result.status,
            error=result.error,
            outcome=outcome.value,
        )
        held = await repo.record_attempt(
            self.webhook_id, self._owner, attempt, status=status, next_attempt_at=next_at, now=now
        )
        if not held:
            return self._stop("lease lost (or the delivery was cancelled meanwhile)")
        self._note(status, result, started)
        if status == DROPPED:
            _log.warning(
                "webhook %s disabled: event %s dropped after %d attempts (%s)",
                self.webhook_id,
                head.event_id,
                head.attempts + 1,
                result.error or f"status {result.status}",
            )
            return self._stop("dropped: the subscription was disabled")
        return True

    @staticmethod
    def _judge(
        head: Delivery, result: AttemptResult, now_us: int
    ) -> tuple[str, int | None, Outcome]:
        """The delivery's new status and next due time (docs/webhooks.md, "Delivery")."""
        outcome = outcome_of(result.status)
        if outcome is Outcome.DELIVERED:
            return DELIVERED, None, outcome
        if outcome is Outcome.PERMANENT:
            return FAILED, None, outcome
        later = retry_after_s(result.retry_after, now_us / 1_000_000)
        delay = next_delay_s(head.attempts + 1, later)
        if delay is None:
            return DROPPED, None, outcome
        return PENDING, now_us + round(delay * 1_000_000), outcome

    def _note(self, status: str, result: AttemptResult, started: int) -> None:
        shown = "retry" if status == PENDING else status
        self.attempts += 1
        self.delivered += status == DELIVERED
        self.last_result = shown
        self.last_status_code = result.status
        self.last_error = result.error
        self.last_attempt_at = started
        self._metrics.record(shown, result.duration_s)

    def _stop(self, why: str) -> bool:
        self.stopped_because = why
        return False
