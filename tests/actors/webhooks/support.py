"""Helpers for the delivery tests: a subscription with a real sealed secret pointing at a
receiver, events in the outbox, a delivery actor wired to real storage, the signature verifier."""

from __future__ import annotations

import hmac
import ipaddress
import json

from actors.webhooks.clock import WallClock
from actors.webhooks.delivery import WebhookDelivery
from actors.webhooks.metrics import DeliveryMetrics
from actors.webhooks.secrets import secret_context, webhook_box
from actors.webhooks.sender import WebhookSender
from protocol.ids import new_id
from storage import events
from storage.open import Storage
from storage.orgs import Org
from storage.webhooks import NewWebhook, Webhook
from tests.webhook_receiver import Arrival, ReceiverTLS

MASTER = bytes(range(32))
BOX = webhook_box(MASTER)
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
LONG_LEASE_S = 30 * 86_400.0  # outlasts every retry schedule: a test takes no lease by surprise


async def subscribe(
    storage: Storage,
    org: Org,
    url: str,
    secret: str = "whsec_test",
    types: tuple[str, ...] = ("*",),
) -> Webhook:
    webhook_id = new_id("whk")
    new = NewWebhook(
        id=webhook_id,
        org_id=org.id,
        url=url,
        events=types,
        description=None,
        enabled=True,
        secret_sealed=BOX.seal(secret, secret_context(org.id, webhook_id)),
        secret_hint=secret[-4:],
    )
    return await storage.webhooks.create(new, WallClock().now_us())


async def emit(storage: Storage, org: Org, type: str, **data: object) -> str:
    async with storage.db.transaction() as tx:
        return await events.append(tx, org.id, type, dict(data))


def sender(tls: ReceiverTLS, **kw: object) -> WebhookSender:
    options: dict[str, object] = {"allowed_networks": LOOPBACK, "ssl_context": tls.client()}
    options.update(kw)
    return WebhookSender(**options)  # type: ignore[arg-type]


def delivery(
    storage: Storage,
    hook: Webhook,
    tls: ReceiverTLS,
    clock: WallClock,
    *,
    owner: str = "test-owner",
    lease_ttl_s: float = LONG_LEASE_S,
    metrics: DeliveryMetrics | None = None,
) -> WebhookDelivery:
    return WebhookDelivery(
        storage.webhooks,
        hook.id,
        hook.org_id,
        owner=owner,
        box=BOX,
        sender=sender(tls),
        clock=clock,
        lease_ttl_s=lease_ttl_s,
        idle_poll_s=1.0,
        metrics=metrics,
    )


def verify(secret: str, arrival: Arrival) -> bool:
    """The signature scheme (docs/webhooks.md), written independently:
    `t=<ts>,v1=<hex>[,v1=…]`, hex HMAC-SHA256 of `<t>.<raw body>` keyed by the secret,
    compared in constant time; `t` matches the timestamp header."""
    header = arrival.header("Service-Webhook-Signature")
    assert header is not None
    fields = [part.split("=", 1) for part in header.split(",")]
    stamps = [v for k, v in fields if k == "t"]
    assert len(stamps) == 1 and stamps[0] == arrival.header("Service-Webhook-Timestamp")
    message = stamps[0].encode() + b"." + arrival.body
    expected = hmac.new(secret.encode(), message, "sha256").hexdigest()
    return any(hmac.compare_digest(v, expected) for k, v in fields if k == "v1")


def signatures(arrival: Arrival) -> int:
    header = arrival.header("Service-Webhook-Signature") or ""
    return header.count("v1=")


def event_ids(arrivals: list[Arrival]) -> list[str]:
    return [json.loads(a.body)["id"] for a in arrivals]
