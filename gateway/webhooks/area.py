"""The webhooks area: the subscriptions API, the delivery actors (the dispatcher and its
janitor) and their gauges."""

from __future__ import annotations

from dataclasses import dataclass

from actors.webhooks import WebhookDispatcher, WebhookSettings
from actors.webhooks import open_webhooks as open_delivery
from gateway.area import Area
from gateway.config import WebhooksConfig
from gateway.core import Core
from gateway.operations.metrics import Metrics
from gateway.webhooks.routes import routes
from protocol.secretbox import WEBHOOK_SECRETS


@dataclass(frozen=True, kw_only=True)
class WebhooksArea(Area):
    dispatcher: WebhookDispatcher  # delivers the outbox to the subscriptions this instance holds


async def open_webhooks(core: Core) -> WebhooksArea:
    config = core.config.webhooks
    dispatcher, janitor = open_delivery(
        core.storage.webhooks, core.master_key, webhook_settings(config)
    )
    await core.supervisor.start(dispatcher)
    await core.supervisor.start(janitor)
    register_webhook_metrics(core.metrics, dispatcher)
    return WebhooksArea(
        routes=routes(core.storage, core.box(WEBHOOK_SECRETS), config, dispatcher.wake),
        dispatcher=dispatcher,
    )


def webhook_settings(config: WebhooksConfig) -> WebhookSettings:
    return WebhookSettings(
        allowed_private_networks=config.allowed_private_networks,
        allow_http=config.allow_http,
        allowed_ports=config.allowed_ports,
        poll_interval_s=config.poll_interval_s,
        lease_ttl_s=config.lease_ttl_s,
        attempt_timeout_s=config.attempt_timeout_s,
        retention_days=config.retention_days,
    )


def register_webhook_metrics(metrics: Metrics, webhooks: WebhookDispatcher) -> None:
    """Attempts by outcome on this instance (a counter, `gateway_webhook_deliveries_total`),
    and the queues of the subscriptions it holds (gauges)."""

    def attempts() -> list[tuple[dict[str, str], float]]:
        return [({"outcome": k}, float(v)) for k, v in webhooks.metrics.attempts.items()]

    def queues(field: str) -> list[tuple[dict[str, str], float]]:
        out = []
        now_us = webhooks.clock.now_us()
        for webhook_id, stats in sorted(webhooks.subscription_stats().items()):
            if field == "pending":
                value = stats.get("pending")
            else:
                oldest = stats.get("oldest_pending_created_at")
                value = None if oldest is None else max(0, now_us - int(str(oldest))) / 1e6
            if isinstance(value, int | float):
                out.append(({"webhook_id": webhook_id}, float(value)))
        return out

    metrics.counter(
        "gateway_webhook_deliveries",
        "Webhook delivery attempts by outcome since this instance started.",
        attempts,
    )
    metrics.gauge(
        "gateway_webhook_queue_depth",
        "Pending deliveries of each subscription this instance delivers.",
        lambda: queues("pending"),
    )
    metrics.gauge(
        "gateway_webhook_oldest_pending_seconds",
        "Age of the oldest pending delivery of each subscription this instance delivers.",
        lambda: queues("oldest"),
    )
