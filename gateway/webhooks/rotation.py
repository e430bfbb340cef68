"""Replacing a webhook's secret, shared by `POST /v1/webhooks/{id}/rotate_secret` and the
console: the new secret sealed in the webhook's own context, the current ciphertext kept as the
previous one (same box, same context), which keeps signing for `secret_rotation_overlap_s`."""

from __future__ import annotations

from actors.webhooks.secrets import secret_context
from gateway.config.schema import WebhooksConfig
from protocol.secretbox import SecretBox
from protocol.timefmt import now_us
from protocol.webhooks import secret_hint
from storage.webhooks import Webhook, WebhookRepository


async def rotate_secret(
    repo: WebhookRepository,
    box: SecretBox,
    config: WebhooksConfig,
    current: Webhook,
    secret: str,
) -> Webhook | None:
    """`current` with `secret` as its secret; None when it no longer exists."""
    now = now_us()
    return await repo.rotate_secret(
        current.org_id,
        current.id,
        now,
        secret_sealed=box.seal(secret, secret_context(current.org_id, current.id)),
        secret_hint=secret_hint(secret),
        previous_secret_sealed=current.secret_sealed,
        previous_expires_at=now + int(config.secret_rotation_overlap_s * 1_000_000),
    )
