"""Migration 0013 brings stored webhook secret hints in line with the rule of
`protocol.webhooks.secret_hint` without opening a secret (issue #19, item 10): a hint stored
before the rule could show a short secret whole. Checked on every backend for every secret
length around the threshold, with and without the `whsec_` prefix (so every base64 padding)."""

from __future__ import annotations

import os

from protocol.ids import new_id
from protocol.secretbox import WEBHOOK_SECRETS, SecretBox
from protocol.webhooks import SECRET_PREFIX, secret_hint
from storage.migrate import available
from storage.open import Storage
from storage.webhooks import NewWebhook
from tests.storage.webhooks_support import T0, org


def _old_hint(secret: str) -> str:
    """The hint as stored before issue #19: the prefix and the last 4 characters, always."""
    prefix = SECRET_PREFIX if secret.startswith(SECRET_PREFIX) else ""
    return f"{prefix}…{secret[-4:]}"


async def test_stored_hints_stop_revealing_short_secrets(storage: Storage) -> None:
    owner = await org(storage)
    box = SecretBox.for_purpose(os.urandom(32), WEBHOOK_SECRETS)
    secrets: dict[str, str] = {}
    for length in range(1, 48):
        for prefix in ("", SECRET_PREFIX):
            secret = prefix + "s" * (length - 4) + "9876"[-length:]
            webhook_id = new_id("whk")
            new = NewWebhook(
                id=webhook_id,
                org_id=owner.id,
                url="https://example.com/hook",
                events=("*",),
                description=None,
                enabled=True,
                secret_sealed=box.seal(secret, (owner.id, webhook_id)),
                secret_hint=_old_hint(secret),
            )
            await storage.webhooks.create(new, T0)
            secrets[webhook_id] = secret
    (migration,) = [m for m in available() if m.version == 13]
    for statement in migration.statements(storage.db.dialect):
        if statement.startswith("UPDATE webhooks"):  # the rest changes the schema: done
            await storage.db.execute(statement)
    for webhook_id, secret in secrets.items():
        record = await storage.webhooks.get(owner.id, webhook_id)
        assert record is not None
        assert record.secret_hint == secret_hint(secret), (len(secret), secret)
        assert box.open(record.secret_sealed, (owner.id, webhook_id)) == secret  # untouched
