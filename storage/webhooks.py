"""Webhook subscriptions, their delivery queues, leases and the delivery log.

Order. Each subscription reads the org's outbox (`events`) past its cursor in outbox order,
`(txid, seq)`. On SQLite `txid` is 0 and one writer at a time commits in `seq` order. On
PostgreSQL `seq` is taken at insert, not at commit, so a reader could see seq 11 before seq 10
commits; there `txid` is the writing transaction's id, and a reader only takes events whose
transaction is older than every transaction still running (`txid < xmin` of its snapshot): no
event can appear behind the cursor later. Transactions ordered this way respect causality (one
that committed before another began has the smaller id). A long-running transaction anywhere in
the PostgreSQL cluster holds delivery back while it runs.

Queue. Events that match the subscription's filter (or target it: test events) are copied into
`webhook_deliveries` as `pending`, up to a batch at a time, in the same transaction that moves
the cursor past them. The owner delivers the lowest `position` pending row, one at a time.
Strict order: a retrying event holds the events behind it (at most the retry schedule, ~31 h,
after which it is dropped and the subscription disabled).

Leases. A subscription's queue is delivered by the instance holding its lease (`lease_owner`
until `lease_expires_at`, wall-clock microseconds). Every write an owner makes is conditional on
still holding it, so an instance that lost its lease (paused, partitioned) changes nothing.

Statuses of a delivery: pending, delivered, failed (a permanent 4xx), dropped (every retry
failed), cancelled (the subscription was disabled or changed while it waited).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from storage.database import Database

PENDING = "pending"
DELIVERED = "delivered"
FAILED = "failed"
DROPPED = "dropped"
CANCELLED = "cancelled"

DISABLED_FAILING = "failing"
DISABLED_MANUAL = "manual"

T = TypeVar("T")


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


@dataclass(frozen=True, slots=True)
class Webhook:
    id: str
    org_id: str
    url: str
    events: tuple[str, ...]
    description: str | None
    enabled: bool
    secret_sealed: str
    secret_hint: str
    previous_secret_sealed: str | None
    previous_secret_expires_at: int | None
    disabled_reason: str | None
    disabled_at: int | None
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class NewWebhook:
    id: str  # whk_…, chosen by the caller (the secret is sealed with it as context)
    org_id: str
    url: str
    events: tuple[str, ...]
    description: str | None
    enabled: bool
    secret_sealed: str
    secret_hint: str


@dataclass(frozen=True, slots=True)
class Delivery:
    """A queued event of one subscription, with what is needed to send it."""

    webhook_id: str
    event_id: str
    event_type: str
    event_created_at: int
    data_json: str  # the stored `data`, embedded verbatim in the envelope
    position: int
    status: str
    attempts: int
    next_attempt_at: int | None
    last_status_code: int | None
    last_error: str | None
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class Attempt:
    event_id: str
    started_at: int
    duration_ms: int
    status_code: int | None
    error: str | None
    outcome: str  # delivered, retry, permanent


@dataclass(frozen=True, slots=True)
class QueueStats:
    webhook_id: str
    org_id: str
    pending: int
    oldest_pending_created_at: int | None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    has_more: bool


class WebhookRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    # -- subscriptions (the API) -------------------------------------------------------

    async def create(self, new: NewWebhook, now: int) -> Webhook:
        """Insert it with the cursor at the org's outbox head: it gets events written after."""
        raise NotImplementedError

    async def get(self, org_id: str, webhook_id: str) -> Webhook | None:
        raise NotImplementedError

    async def list_for_org(self, org_id: str, *, limit: int, after: str | None) -> Page[Webhook]:
        """Oldest first; `after` a webhook id of this org (an unknown id: from the start)."""
        raise NotImplementedError

    async def update(
        self,
        org_id: str,
        webhook_id: str,
        now: int,
        *,
        url: str | _Unset = UNSET,
        events: tuple[str, ...] | _Unset = UNSET,
        description: str | None | _Unset = UNSET,
        enabled: bool | _Unset = UNSET,
    ) -> Webhook | None:
        """Change the given fields. Disabling clears nothing but stops delivery: pending rows
        become cancelled and `disabled_reason` is "manual". Enabling (from disabled) or changing
        `events` moves the cursor to the outbox head (the change takes effect for the next
        event written), cancels what was pending, and clears `disabled_*`."""
        raise NotImplementedError

    async def delete(self, org_id: str, webhook_id: str) -> bool:
        """Remove the subscription, its deliveries and attempts."""
        raise NotImplementedError

    async def rotate_secret(
        self,
        org_id: str,
        webhook_id: str,
        now: int,
        *,
        secret_sealed: str,
        secret_hint: str,
        previous_secret_sealed: str,
        previous_expires_at: int,
    ) -> Webhook | None:
        """Replace the secret; the caller re-sealed the current one as the previous one
        (it still signs until `previous_expires_at`)."""
        raise NotImplementedError

    async def append_test_event(
        self, org_id: str, webhook_id: str, event_type: str, data: dict[str, object]
    ) -> tuple[str, int]:
        """An outbox event for this subscription only; returns (event id, created_at)."""
        raise NotImplementedError

    # -- the delivery log (the API) ----------------------------------------------------

    async def deliveries(
        self, org_id: str, webhook_id: str, *, limit: int, after: str | None
    ) -> Page[tuple[Delivery, list[Attempt]]]:
        """Newest first (by `position`), each with its attempts oldest first; `after` an
        event id of this subscription's log. Empty when the subscription is not the org's."""
        raise NotImplementedError

    async def redeliver(
        self, org_id: str, webhook_id: str, event_id: str, now: int
    ) -> Delivery | None:
        """Queue the event again at the tail: pending, attempts 0, due now. The event must be
        one this subscription would receive (in its log, or in the org's outbox and matching
        its filter); None otherwise."""
        raise NotImplementedError

    async def redeliver_since(
        self, org_id: str, webhook_id: str, since: int, now: int, *, limit: int
    ) -> int:
        """Queue again, in outbox order, every event since `since` (created_at) that this
        subscription would receive and that is not delivered or pending: failed, dropped,
        cancelled, and events written while it was disabled. At most `limit`; returns how many."""
        raise NotImplementedError

    # -- the delivery side (actors) ----------------------------------------------------

    async def enabled(self) -> list[tuple[str, str]]:
        """(webhook id, org id) of every enabled subscription."""
        raise NotImplementedError

    async def claim(self, webhook_id: str, owner: str, now: int, ttl_us: int) -> bool:
        """Take or renew the lease; False when another owner holds an unexpired one or the
        subscription is gone or disabled."""
        raise NotImplementedError

    async def release(self, webhook_id: str, owner: str) -> None:
        raise NotImplementedError

    async def fill_queue(self, webhook_id: str, owner: str, now: int, *, limit: int) -> int:
        """Copy the next outbox events it should receive into its queue and move its cursor
        past everything read (matching or not), in one transaction, as the lease owner.
        Returns how many rows were queued; -1 when the lease is not held."""
        raise NotImplementedError

    async def head(self, webhook_id: str) -> Delivery | None:
        """The pending delivery with the lowest position."""
        raise NotImplementedError

    async def record_attempt(
        self,
        webhook_id: str,
        owner: str,
        attempt: Attempt,
        *,
        status: str,
        next_attempt_at: int | None,
        now: int,
    ) -> bool:
        """Log the attempt and set the delivery's new status (pending with `next_attempt_at`,
        delivered, failed or dropped), as the lease owner. `dropped` also disables the
        subscription ("failing") and cancels what else is pending. False: lease not held
        (nothing written)."""
        raise NotImplementedError

    async def outbox_head(self) -> tuple[int, int]:
        """The newest safely readable outbox position `(txid, seq)` (see "Order")."""
        raise NotImplementedError

    async def orgs_with_events_after(
        self, position: tuple[int, int], *, limit: int
    ) -> tuple[set[str], tuple[int, int]]:
        """Orgs with outbox events past `position` that are safe to read, and the new
        position (to wake their subscriptions' actors)."""
        raise NotImplementedError

    async def queue_stats(self) -> list[QueueStats]:
        """Per enabled subscription: pending deliveries and the oldest one's queue time."""
        raise NotImplementedError

    async def by_id(self, webhook_id: str) -> Webhook | None:
        """The subscription as its delivery actor needs it (secrets stay sealed: the actor
        opens them)."""
        raise NotImplementedError

    # -- the janitor -------------------------------------------------------------------

    async def purge(self, before: int, *, batch: int) -> int:
        """Delete up to `batch` attempts and finished deliveries (not pending) last changed
        before `before`, and outbox events created before it that no pending delivery needs.
        Returns rows deleted (call again while it returns `batch` or more)."""
        raise NotImplementedError
