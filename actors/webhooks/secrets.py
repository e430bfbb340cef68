"""Webhook signing secrets at rest: the SecretBox purpose and context, and which secrets sign.

A subscription's secret is sealed with the purpose WEBHOOK_SECRETS and the context
(org id, webhook id), so a sealed secret copied to another subscription does not open. During a
rotation's overlap the previous secret signs too (one `v1` per secret in the signature header,
newest first), until `previous_secret_expires_at`.
"""

from __future__ import annotations

from protocol.secretbox import WEBHOOK_SECRETS, SecretBox
from storage.webhooks import Webhook


def webhook_box(master_key: bytes) -> SecretBox:
    return SecretBox.for_purpose(master_key, WEBHOOK_SECRETS)


def secret_context(org_id: str, webhook_id: str) -> tuple[str, str]:
    """The associated data a subscription's secrets are sealed with (API and actor alike)."""
    return (org_id, webhook_id)


def signing_secrets(box: SecretBox, webhook: Webhook, now_us: int) -> list[str]:
    """The current secret, then the previous one while its overlap lasts. SecretBoxError if
    a sealed secret does not open (a wrong master key): the delivery cannot sign at all."""
    context = secret_context(webhook.org_id, webhook.id)
    found = [box.open(webhook.secret_sealed, context)]
    expires = webhook.previous_secret_expires_at
    if webhook.previous_secret_sealed and expires is not None and expires > now_us:
        found.append(box.open(webhook.previous_secret_sealed, context))
    return found
