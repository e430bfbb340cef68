"""Stored webhook records as the API answers them (protocol/webhooks_api.py types)."""

from __future__ import annotations

from protocol.timefmt import to_iso
from protocol.webhooks_api import (
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
    WebhookWithSecret,
)
from storage.webhooks import Attempt, Delivery
from storage.webhooks import Webhook as WebhookRecord


def _iso(us: int) -> str:
    return to_iso(us) or ""


def webhook_item(record: WebhookRecord) -> Webhook:
    return Webhook(
        id=record.id,
        url=record.url,
        events=list(record.events),
        description=record.description,
        enabled=record.enabled,
        secret_hint=record.secret_hint,
        disabled_reason=record.disabled_reason,
        disabled_at=to_iso(record.disabled_at),
        created_at=_iso(record.created_at),
        updated_at=_iso(record.updated_at),
    )


def webhook_with_secret(record: WebhookRecord, secret: str) -> WebhookWithSecret:
    item = webhook_item(record)
    return WebhookWithSecret(
        id=item.id,
        url=item.url,
        events=item.events,
        secret=secret,
        description=item.description,
        enabled=item.enabled,
        secret_hint=item.secret_hint,
        disabled_reason=item.disabled_reason,
        disabled_at=item.disabled_at,
        created_at=item.created_at,
        updated_at=item.updated_at,
    )


def attempt_item(attempt: Attempt) -> WebhookAttempt:
    return WebhookAttempt(
        started_at=_iso(attempt.started_at),
        duration_ms=attempt.duration_ms,
        status_code=attempt.status_code,
        error=attempt.error,
        outcome=attempt.outcome,
    )


def delivery_item(delivery: Delivery, attempts: list[Attempt]) -> WebhookDelivery:
    return WebhookDelivery(
        webhook_id=delivery.webhook_id,
        event_id=delivery.event_id,
        event_type=delivery.event_type,
        event_created_at=_iso(delivery.event_created_at),
        status=delivery.status,
        attempts=delivery.attempts,
        next_attempt_at=to_iso(delivery.next_attempt_at),
        last_status_code=delivery.last_status_code,
        last_error=delivery.last_error,
        created_at=_iso(delivery.created_at),
        updated_at=_iso(delivery.updated_at),
        attempt_log=[attempt_item(a) for a in attempts],
    )
