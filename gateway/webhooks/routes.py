"""The Webhooks API: subscriptions (create, list, retrieve, update, delete), their secrets
(returned at creation and rotation only), test events, and the delivery log with redelivery.

Callers need a management key or a secret key holding `webhooks:manage`. Another
organization's subscription is indistinguishable from a missing one (404 `webhook_not_found`)
on every route. Secrets are stored sealed (actors/webhooks/secrets.py: the box and context the
delivery actors open them with) and never logged. Routes only write rows; delivery is the
dispatcher's, which `wake(webhook_id)` tells that a subscription has something new.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from actors.webhooks.secrets import secret_context
from gateway.config.schema import WebhooksConfig
from gateway.web import Operation, Request, Response, Routes, json_response
from gateway.webhooks.rotation import rotate_secret as rotate
from gateway.webhooks.target import check_target
from gateway.webhooks.views import delivery_item, webhook_item, webhook_with_secret
from protocol import errors
from protocol.decoding import decode_json
from protocol.ids import new_id
from protocol.scopes import WEBHOOKS_MANAGE
from protocol.secretbox import SecretBox
from protocol.timefmt import now_us, to_iso
from protocol.webhook_samples import sample_data
from protocol.webhooks import generate_secret, secret_hint
from protocol.webhooks_api import (
    Webhook,
    WebhookCreate,
    WebhookDeleted,
    WebhookDelivery,
    WebhookDeliveryList,
    WebhookEvent,
    WebhookList,
    WebhookRedeliverEvent,
    WebhookRedeliverSince,
    WebhookRedelivery,
    WebhookRotateSecret,
    WebhookTest,
    WebhookUpdate,
    WebhookWithSecret,
)
from services.principal import Principal
from storage.open import Storage
from storage.webhooks import NewWebhook
from storage.webhooks import Webhook as WebhookRecord

Wake = Callable[[str], object]  # the dispatcher's wake (its answer is not needed)
T = TypeVar("T")

_TAG = "Webhooks"
_AUTH_ERRORS = (401, 403)
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_REDELIVER = 1000  # events queued again by one bulk redelivery (call again for more)
_MAX_SINCE_S = 253_402_300_799  # 9999-12-31T23:59:59Z
_PAGING = (
    ("limit", "integer", f"page size, default {DEFAULT_LIMIT}, max {MAX_LIMIT}"),
    ("after", "string", "the `last_id` of the previous page"),
)


def _not_found(webhook_id: str) -> errors.APIError:
    return errors.not_found(
        f"No webhook with id {webhook_id!r}.", code="webhook_not_found", param="webhook_id"
    )


def _disabled(webhook_id: str) -> errors.APIError:
    return errors.conflict(
        f"The webhook {webhook_id!r} is disabled; enable it (PATCH enabled: true) first.",
        code="webhook_disabled",
    )


def _caller(request: Request) -> tuple[Principal, str]:
    assert request.principal is not None
    return request.principal, request.path_params["webhook_id"]


def _page(request: Request) -> tuple[int, str | None]:
    limit = request.query_int("limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
    after = request.query.get("after") or None
    return limit, after


async def optional_body(request: Request, type: type[T], empty: T) -> T:
    """The body decoded into `type`, or `empty` when there is none (a body is optional)."""
    raw = await request.body()
    return decode_json(raw, type) if raw.strip() else empty


def since_us(value: str | int | float) -> int:
    """`since` (ISO 8601 with an offset, or Unix seconds) in epoch microseconds; 400 if not."""
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            when = None
        if when is None or when.tzinfo is None:
            raise errors.invalid_request(
                "`since` must be an ISO 8601 time with an offset (2030-01-01T00:00:00Z)"
                " or Unix seconds.",
                param="since",
            )
        seconds = when.timestamp()
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or not 0 <= seconds <= _MAX_SINCE_S:
        raise errors.invalid_request("`since` is out of range.", param="since")
    return int(seconds * 1_000_000)


def routes(storage: Storage, box: SecretBox, config: WebhooksConfig, wake: Wake) -> Routes:
    """`box`: `webhook_box` of the master key (watched: services/keyring.py)."""
    r = Routes()
    repo = storage.webhooks

    async def owned(org_id: str, webhook_id: str) -> WebhookRecord:
        record = await repo.get(org_id, webhook_id)
        if record is None:
            raise _not_found(webhook_id)
        return record

    @r.operation(
        Operation(
            "POST",
            "/v1/webhooks",
            "Subscribe a URL to events (the secret is returned only here and on rotation)",
            _TAG,
            request=WebhookCreate,
            response=WebhookWithSecret,
            scope=WEBHOOKS_MANAGE,
            errors=(400, *_AUTH_ERRORS, 413),
        )
    )
    async def create_webhook(request: Request) -> Response:
        principal = request.principal
        assert principal is not None
        body = await request.json(WebhookCreate)
        await check_target(body.url, config)
        secret = generate_secret() if body.secret is None else body.secret
        webhook_id = new_id("whk")
        new = NewWebhook(
            id=webhook_id,
            org_id=principal.org_id,
            url=body.url,
            events=tuple(body.events),
            description=body.description,
            enabled=body.enabled,
            secret_sealed=box.seal(secret, secret_context(principal.org_id, webhook_id)),
            secret_hint=secret_hint(secret),
        )
        record = await repo.create(new, now_us())
        if record.enabled:
            wake(record.id)
        return json_response(webhook_with_secret(record, secret))

    @r.operation(
        Operation(
            "GET",
            "/v1/webhooks",
            "List the organization's webhooks, oldest first",
            _TAG,
            response=WebhookList,
            scope=WEBHOOKS_MANAGE,
            errors=(400, *_AUTH_ERRORS),
            query=_PAGING,
        )
    )
    async def list_webhooks(request: Request) -> Response:
        principal = request.principal
        assert principal is not None
        limit, after = _page(request)
        page = await repo.list_for_org(principal.org_id, limit=limit, after=after)
        items = [webhook_item(w) for w in page.items]
        return json_response(
            WebhookList(
                data=items,
                has_more=page.has_more,
                first_id=items[0].id if items else None,
                last_id=items[-1].id if items else None,
            )
        )

    @r.operation(
        Operation(
            "GET",
            "/v1/webhooks/{webhook_id}",
            "Retrieve a webhook (without its secret)",
            _TAG,
            response=Webhook,
            scope=WEBHOOKS_MANAGE,
            errors=(*_AUTH_ERRORS, 404),
        )
    )
    async def get_webhook(request: Request) -> Response:
        principal, webhook_id = _caller(request)
        return json_response(webhook_item(await owned(principal.org_id, webhook_id)))

    @r.operation(
        Operation(
            "PATCH",
            "/v1/webhooks/{webhook_id}",
            "Update a webhook: only the fields sent change (a new secret: rotate_secret)",
            _TAG,
            request=WebhookUpdate,
            response=Webhook,
            scope=WEBHOOKS_MANAGE,
            errors=(400, *_AUTH_ERRORS, 404, 413),
        )
    )
    async def update_webhook(request: Request) -> Response:
        principal, webhook_id = _caller(request)
        body = await request.json(WebhookUpdate)
        changes: dict[str, Any] = {}
        if isinstance(body.url, str):
            await owned(principal.org_id, webhook_id)  # 404 before judging the URL
            await check_target(body.url, config)
            changes["url"] = body.url
        if isinstance(body.events, list):
            changes["events"] = tuple(body.events)
        if body.description is None or isinstance(body.description, str):
            changes["description"] = body.description
        if isinstance(body.enabled, bool):
            changes["enabled"] = body.enabled
        record = await repo.update(
            principal.org_id,
            webhook_id,
            now_us(),
            **changes,
        )
        if record is None:
            raise _not_found(webhook_id)
        wake(webhook_id)
        return json_response(webhook_item(record))

    @r.operation(
        Operation(
            "DELETE",
            "/v1/webhooks/{webhook_id}",
            "Delete a webhook with its queue and delivery log",
            _TAG,
            response=WebhookDeleted,
            scope=WEBHOOKS_MANAGE,
            errors=(*_AUTH_ERRORS, 404),
        )
    )
    async def delete_webhook(request: Request) -> Response:
        principal, webhook_id = _caller(request)
        if not await repo.delete(principal.org_id, webhook_id):
            raise _not_found(webhook_id)
        wake(webhook_id)  # its actor, if running, finds it gone and stops
        return json_response(WebhookDeleted(id=webhook_id, deleted=True))

    @r.operation(
        Operation(
            "POST",
            "/v1/webhooks/{webhook_id}/test",
            "Send a synthetic event of a type to this webhook only (`data.test` is true)",
            _TAG,
            request=WebhookTest,
            response=WebhookEvent,
            success_status=202,
            scope=WEBHOOKS_MANAGE,
            errors=(400, *_AUTH_ERRORS, 404, 409, 413),
        )
    )
    async def test_webhook(request: Request) -> Response:
        principal, webhook_id = _caller(request)
        body = await request.json(WebhookTest)
        record = await owned(principal.org_id, webhook_id)
        if not record.enabled:
            raise _disabled(webhook_id)
        data = sample_data(body.type)
        event_id, created_at = await repo.append_test_event(
            principal.org_id, webhook_id, body.type, data
        )
        wake(webhook_id)
        created = to_iso(created_at) or ""
        event = WebhookEvent(id=event_id, type=body.type, created_at=created, data=data)
        return json_response(event, status=202)

    @r.operation(
        Operation(
            "POST",
            "/v1/webhooks/{webhook_id}/rotate_secret",
            "Replace the secret (returned here); the old one keeps signing for"
            " [webhooks] secret_rotation_overlap_s. The body is optional.",
            _TAG,
            request=WebhookRotateSecret,
            request_required=False,
            response=WebhookWithSecret,
            scope=WEBHOOKS_MANAGE,
            errors=(400, *_AUTH_ERRORS, 404, 413),
        )
    )
    async def rotate_secret(request: Request) -> Response:
        principal, webhook_id = _caller(request)
        body = await optional_body(request, WebhookRotateSecret, WebhookRotateSecret())
        current = await owned(principal.org_id, webhook_id)
        secret = generate_secret() if body.secret is None else body.secret
        record = await rotate(repo, box, config, current, secret)
        if record is None:
            raise _not_found(webhook_id)
        return json_response(webhook_with_secret(record, secret))

    @r.operation(
        Operation(
            "GET",
            "/v1/webhooks/{webhook_id}/deliveries",
            "The webhook's delivery log, newest first, each with its attempts",
            _TAG,
            response=WebhookDeliveryList,
            scope=WEBHOOKS_MANAGE,
            errors=(400, *_AUTH_ERRORS, 404),
            query=_PAGING,
        )
    )
    async def list_deliveries(request: Request) -> Response:
        principal, webhook_id = _caller(request)
        limit, after = _page(request)
        await owned(principal.org_id, webhook_id)
        page = await repo.deliveries(principal.org_id, webhook_id, limit=limit, after=after)
        items = [delivery_item(d, attempts) for d, attempts in page.items]
        return json_response(
            WebhookDeliveryList(
                data=items,
                has_more=page.has_more,
                first_id=items[0].event_id if items else None,
                last_id=items[-1].event_id if items else None,
            )
        )

    @r.operation(
        Operation(
            "POST",
            "/v1/webhooks/{webhook_id}/deliveries/{event_id}/redeliver",
            "Queue an event again for this webhook (same id and body: receivers deduplicate)",
            _TAG,
            request=WebhookRedeliverEvent,
            request_required=False,
            response=WebhookDelivery,
            success_status=202,
            scope=WEBHOOKS_MANAGE,
            errors=(400, *_AUTH_ERRORS, 404, 409, 413),
        )
    )
    async def redeliver(request: Request) -> Response:
        principal, webhook_id = _caller(request)
        await optional_body(request, WebhookRedeliverEvent, WebhookRedeliverEvent())
        event_id = request.path_params["event_id"]
        record = await owned(principal.org_id, webhook_id)
        if not record.enabled:
            raise _disabled(webhook_id)
        delivery = await repo.redeliver(principal.org_id, webhook_id, event_id, now_us())
        if delivery is None:
            raise errors.not_found(
                f"No event {event_id!r} for this webhook.",
                code="event_not_found",
                param="event_id",
            )
        wake(webhook_id)
        return json_response(delivery_item(delivery, []), status=202)

    @r.operation(
        Operation(
            "POST",
            "/v1/webhooks/{webhook_id}/redeliver",
            "Queue again every event since a time that was not delivered (failed, dropped,"
            f" cancelled, or written while disabled), in order; at most {MAX_REDELIVER}",
            _TAG,
            request=WebhookRedeliverSince,
            response=WebhookRedelivery,
            success_status=202,
            scope=WEBHOOKS_MANAGE,
            errors=(400, *_AUTH_ERRORS, 404, 409, 413),
        )
    )
    async def redeliver_since(request: Request) -> Response:
        principal, webhook_id = _caller(request)
        body = await request.json(WebhookRedeliverSince)
        since = since_us(body.since)
        record = await owned(principal.org_id, webhook_id)
        if not record.enabled:
            raise _disabled(webhook_id)
        queued = await repo.redeliver_since(
            principal.org_id, webhook_id, since, now_us(), limit=MAX_REDELIVER
        )
        if queued:
            wake(webhook_id)
        return json_response(
            WebhookRedelivery(queued=queued, has_more=queued >= MAX_REDELIVER), status=202
        )

    return r
