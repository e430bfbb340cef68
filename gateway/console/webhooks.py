"""The webhooks pages: subscriptions, a subscription's delivery log, and its actions (test
event, enable or disable, secret rotation, redelivery)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.console.http import Page, PageError, redirect
from gateway.console.routing import PREFIX, html, need_org, route
from gateway.server.asgi import Send
from gateway.webhooks.area import WebhooksArea
from gateway.webhooks.rotation import rotate_secret
from protocol.secretbox import WEBHOOK_SECRETS
from protocol.timefmt import now_us
from protocol.webhook_samples import sample_data
from protocol.webhooks import EVENT_TYPES, generate_secret
from storage.orgs import Org
from storage.webhooks import Webhook

if TYPE_CHECKING:
    from gateway.console.app import Console


@route("GET", PREFIX + "/webhooks")
async def webhooks(console: Console, page: Page, send: Send) -> None:
    org = await console.org_of(page)
    values = await console.common(page, "webhooks", org)
    values["webhooks"] = (
        (await console.runtime.storage.webhooks.list_for_org(org.id, limit=100, after=None)).items
        if org
        else []
    )
    await html(send, console.render("webhooks.html", **values))


async def _webhook(console: Console, org: Org, webhook_id: str) -> Webhook:
    record = await console.runtime.storage.webhooks.get(org.id, webhook_id)
    if record is None:
        raise PageError(404, "There is no such webhook.")
    return record


@route("GET", PREFIX + "/webhooks/{webhook_id}")
async def webhook(console: Console, page: Page, send: Send) -> None:
    org = await need_org(console, page)
    record = await _webhook(console, org, page.params["webhook_id"])
    values = await console.common(page, "webhooks", org)
    deliveries = await console.runtime.storage.webhooks.deliveries(
        org.id, record.id, limit=50, after=None
    )
    values.update(webhook=record, deliveries=deliveries.items, event_types=EVENT_TYPES)
    await html(send, console.render("webhook.html", **values))


def _wake(console: Console, webhook_id: str) -> None:
    console.runtime.area(WebhooksArea).dispatcher.wake(webhook_id)


@route("POST", PREFIX + "/webhooks/{webhook_id}/{action}")
async def webhook_action(console: Console, page: Page, send: Send) -> None:
    form = await page.form()
    org = await need_org(console, page, form)
    record = await _webhook(console, org, page.params["webhook_id"])
    action = page.params["action"]
    repo = console.runtime.storage.webhooks
    assert page.session is not None
    if action == "test":
        event_type = form.get("type", "")
        if event_type not in EVENT_TYPES:
            raise PageError(400, "Choose an event type.")
        if not record.enabled:
            raise PageError(409, "The webhook is disabled.")
        await repo.append_test_event(org.id, record.id, event_type, sample_data(event_type))
        await console.flash(page, "info", f"Test event {event_type} queued.")
    elif action in ("enable", "disable"):
        changed = await repo.update(org.id, record.id, now_us(), enabled=action == "enable")
        if changed is None:
            raise PageError(404, "There is no such webhook.")
        await console.flash(page, "info", f"Webhook {action}d.")
    elif action == "rotate":
        secret = generate_secret()
        runtime = console.runtime
        box = runtime.box(WEBHOOK_SECRETS)
        rotated = await rotate_secret(repo, box, runtime.config.webhooks, record, secret)
        if rotated is None:
            raise PageError(404, "There is no such webhook.")
        await console.flash(page, "secret", f"{record.url}\0{secret}")
    else:
        raise PageError(404, "There is no such action.")
    _wake(console, record.id)
    await redirect(send, console.back(f"/webhooks/{record.id}", org, page))


@route("POST", PREFIX + "/webhooks/{webhook_id}/deliveries/{event_id}/redeliver")
async def redeliver(console: Console, page: Page, send: Send) -> None:
    form = await page.form()
    org = await need_org(console, page, form)
    record = await _webhook(console, org, page.params["webhook_id"])
    if not record.enabled:
        raise PageError(409, "The webhook is disabled.")
    event_id = page.params["event_id"]
    found = await console.runtime.storage.webhooks.redeliver(org.id, record.id, event_id, now_us())
    if found is None:
        raise PageError(404, "There is no such event for this webhook.")
    _wake(console, record.id)
    assert page.session is not None
    await console.flash(page, "info", f"Event {event_id} queued again.")
    await redirect(send, console.back(f"/webhooks/{record.id}", org, page))
