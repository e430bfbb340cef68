"""Webhook delivery: the sender (one HTTPS attempt), a delivery actor per subscription, the
dispatcher that holds leases and runs them, and the janitor.

The webhooks area (gateway/webhooks/area.py) calls `open_webhooks` and starts both actors
under the root supervisor; the API uses the dispatcher's `wake`, `subscription_stats` and
`metrics`, and `check_url`.
"""

from __future__ import annotations

from actors.webhooks.clock import WallClock
from actors.webhooks.dispatcher import WebhookDispatcher
from actors.webhooks.janitor import WebhookJanitor
from actors.webhooks.secrets import secret_context, webhook_box
from actors.webhooks.sender import WebhookSender, check_url
from actors.webhooks.settings import WebhookSettings
from storage.webhooks import WebhookRepository

__all__ = [
    "WallClock",
    "WebhookDispatcher",
    "WebhookJanitor",
    "WebhookSender",
    "WebhookSettings",
    "check_url",
    "open_webhooks",
    "secret_context",
    "webhook_box",
]


def open_webhooks(
    repo: WebhookRepository,
    master_key: bytes,
    settings: WebhookSettings,
    *,
    clock: WallClock | None = None,
) -> tuple[WebhookDispatcher, WebhookJanitor]:
    """The instance's dispatcher and janitor, sharing one clock; start both under the root
    supervisor (the dispatcher shows its delivery actors as its children)."""
    clock = clock or WallClock()
    dispatcher = WebhookDispatcher(repo, webhook_box(master_key), settings, clock=clock)
    janitor = WebhookJanitor(
        repo,
        retention_s=settings.retention_days * 86_400,
        interval_s=settings.janitor_interval_s,
        clock=clock,
    )
    return dispatcher, janitor
