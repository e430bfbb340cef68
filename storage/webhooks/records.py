"""What the webhook repository stores and answers: statuses, records, and the SQL column
lists its modules share."""

from __future__ import annotations

from dataclasses import dataclass

from storage.pages import Page as Page  # re-exported: the webhook modules import it here

PENDING = "pending"
DELIVERED = "delivered"
FAILED = "failed"
DROPPED = "dropped"
CANCELLED = "cancelled"

DISABLED_FAILING = "failing"
DISABLED_MANUAL = "manual"


class Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()


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


Position = tuple[int, int]  # (txid, seq): a place in the outbox order

WEBHOOK_COLUMNS = (
    "id, org_id, url, events, description, enabled, secret_sealed, secret_hint,"
    " previous_secret_sealed, previous_secret_expires_at, disabled_reason, disabled_at,"
    " created_at, updated_at"
)
DELIVERY_SELECT = (
    "SELECT d.webhook_id, d.event_id, e.type AS event_type, e.created_at AS event_created_at,"
    " e.data AS data_json, d.position, d.status, d.attempts, d.next_attempt_at,"
    " d.last_status_code, d.last_error, d.created_at, d.updated_at"
    " FROM webhook_deliveries d JOIN events e ON e.id = d.event_id"
)
# Statuses redeliver_since queues again (delivered and pending rows are left alone).
REQUEUEABLE = (FAILED, DROPPED, CANCELLED)
# The lease condition every owner's write carries.
LEASED = "id = :id AND enabled = :yes AND lease_owner = :owner AND lease_expires_at > :now"
