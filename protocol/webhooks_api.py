"""The Webhooks API wire types: request bodies (validated on decode) and response bodies.

The same structs validate requests and describe them in /openapi.json. What needs I/O (the URL's
addresses) is checked by the route (gateway/webhooks/target.py), not here.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, UnsetType

from protocol.errors import SecretTooShort, invalid_request
from protocol.labels import Label
from protocol.webhooks import ALL, KNOWN_TYPES, MAX_SECRET_CHARS, check_custom_secret
from protocol.webhooks import normalize_filter as _normalize

MAX_URL_CHARS = 2048
MAX_DESCRIPTION_CHARS = 512

Url = Annotated[str, Meta(min_length=1, max_length=MAX_URL_CHARS)]
EventType = Annotated[str, Meta(min_length=1, max_length=64)]
Events = Annotated[list[EventType], Meta(min_length=1, max_length=64)]
Description = Annotated[Label, Meta(max_length=MAX_DESCRIPTION_CHARS)]
Secret = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_SECRET_CHARS,
        description="printable ASCII without spaces; at least 24 characters after an optional"
        " `whsec_` prefix",
    ),
]


def normalize_events(events: list[str]) -> list[str]:
    """The filter as stored: known types without repeats, or `["*"]` alone (400 naming the
    entry otherwise)."""
    for i, event in enumerate(events):
        if event != ALL and event not in KNOWN_TYPES:
            raise invalid_request(
                f"Unknown event type {event!r}; known types: {', '.join(sorted(KNOWN_TYPES))},"
                ' or "*" for all.',
                param=f"events[{i}]",
                code="invalid_event_type",
            )
    try:
        return list(_normalize(events))
    except ValueError as exc:
        raise invalid_request(f"`events`: {exc}.", param="events") from None


def check_secret(secret: str) -> None:
    try:
        check_custom_secret(secret)
    except SecretTooShort as exc:
        raise invalid_request(
            f"`secret`: {exc}.", param="secret", code="secret_too_short"
        ) from None
    except ValueError as exc:
        raise invalid_request(f"`secret`: {exc}.", param="secret") from None


class WebhookCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    url: Url
    events: Events
    secret: Secret | None = None  # omitted or null: a `whsec_…` secret is generated
    description: Description | None = None
    enabled: bool = True

    def __post_init__(self) -> None:
        self.events = normalize_events(self.events)
        if self.secret is not None:
            check_secret(self.secret)


_NO_SECRET = "Not accepted: a new secret comes from POST /v1/webhooks/{id}/rotate_secret."


class WebhookUpdate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Only included fields change; `description: null` clears it."""

    url: Url | UnsetType = UNSET
    events: Events | UnsetType = UNSET
    description: Description | None | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET
    # Declared only to answer it with a pointer to rotation (an unknown-field error would not).
    secret: Annotated[Any, Meta(description=_NO_SECRET)] | UnsetType = UNSET

    def __post_init__(self) -> None:
        if not isinstance(self.secret, UnsetType):
            raise invalid_request(
                "A webhook's secret cannot be changed with PATCH: rotate it with"
                " POST /v1/webhooks/{id}/rotate_secret (the old one keeps signing for a while).",
                param="secret",
                code="use_rotate_secret",
            )
        if not isinstance(self.events, UnsetType):
            self.events = normalize_events(self.events)


class WebhookRotateSecret(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The body is optional; without `secret` a `whsec_…` secret is generated."""

    secret: Secret | None = None

    def __post_init__(self) -> None:
        if self.secret is not None:
            check_secret(self.secret)


class WebhookRedeliverEvent(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """No fields: the body may be omitted or `{}`."""


class WebhookTest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    type: EventType

    def __post_init__(self) -> None:
        if self.type not in KNOWN_TYPES:
            raise invalid_request(
                f"Unknown event type {self.type!r}; a test event has one of:"
                f" {', '.join(sorted(KNOWN_TYPES))}.",
                param="type",
                code="invalid_event_type",
            )


class WebhookRedeliverSince(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # ISO 8601 with an offset (`2030-01-01T00:00:00Z`) or Unix seconds.
    since: str | int | float


class Webhook(msgspec.Struct, kw_only=True):
    """A subscription as listed, retrieved or updated: never its secret, only `secret_hint`."""

    id: str
    object: str = "webhook"
    url: str
    events: list[str]
    description: str | None
    enabled: bool
    secret_hint: str
    disabled_reason: str | None  # null, "manual" (PATCH enabled false), "failing" (retries spent)
    disabled_at: str | None
    created_at: str
    updated_at: str


class WebhookWithSecret(msgspec.Struct, kw_only=True):
    """The create and rotate_secret responses: the only times `secret` is returned."""

    id: str
    object: str = "webhook"
    url: str
    events: list[str]
    secret: str
    description: str | None
    enabled: bool
    secret_hint: str
    disabled_reason: str | None
    disabled_at: str | None
    created_at: str
    updated_at: str


class WebhookList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[Webhook]
    has_more: bool
    first_id: str | None
    last_id: str | None  # pass as `after` for the next page


class WebhookDeleted(msgspec.Struct, kw_only=True):
    id: str
    object: str = "webhook.deleted"
    deleted: bool


class WebhookEvent(msgspec.Struct, kw_only=True):
    """An event as its envelope is delivered (docs/webhooks.md)."""

    id: str
    type: str
    created_at: str
    data: dict[str, Any]


class WebhookAttempt(msgspec.Struct, kw_only=True):
    started_at: str
    duration_ms: int
    status_code: int | None  # null: no response (`error` says why)
    error: str | None
    outcome: str  # delivered, retry, permanent


class WebhookDelivery(msgspec.Struct, kw_only=True):
    object: str = "webhook.delivery"
    webhook_id: str
    event_id: str
    event_type: str
    event_created_at: str
    status: str  # pending, delivered, failed, dropped, cancelled
    attempts: int  # made since it was last queued
    next_attempt_at: str | None  # while pending
    last_status_code: int | None
    last_error: str | None
    created_at: str  # queued (again, after a redelivery)
    updated_at: str
    attempt_log: list[WebhookAttempt]  # oldest first


class WebhookDeliveryList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[WebhookDelivery]
    has_more: bool
    first_id: str | None  # event ids
    last_id: str | None


class WebhookRedelivery(msgspec.Struct, kw_only=True):
    object: str = "webhook.redelivery"
    queued: int
    has_more: bool  # the cap was reached: call again for the rest
