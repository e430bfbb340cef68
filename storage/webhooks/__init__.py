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

The repository is one class over two modules: `subscriptions.py` (the API side) and `queue.py`
(the delivery side); `records.py` holds what they store and answer, `rows.py` what they share.
"""

from __future__ import annotations

from storage.database import Database
from storage.webhooks.queue import DeliveryQueue
from storage.webhooks.records import (
    CANCELLED,
    DELIVERED,
    DISABLED_FAILING,
    DISABLED_MANUAL,
    DROPPED,
    FAILED,
    PENDING,
    UNSET,
    Attempt,
    Delivery,
    NewWebhook,
    Page,
    Position,
    QueueStats,
    Webhook,
)
from storage.webhooks.subscriptions import Subscriptions


class WebhookRepository(Subscriptions, DeliveryQueue):
    def __init__(self, db: Database) -> None:
        self._db = db


__all__ = [
    "Attempt",
    "CANCELLED",
    "DELIVERED",
    "DISABLED_FAILING",
    "DISABLED_MANUAL",
    "DROPPED",
    "Delivery",
    "FAILED",
    "NewWebhook",
    "PENDING",
    "Page",
    "Position",
    "QueueStats",
    "UNSET",
    "Webhook",
    "WebhookRepository",
]
