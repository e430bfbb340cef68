"""Organizations that must exist at start: the bootstrap key's, and a first one on a new install."""

from __future__ import annotations

from protocol.credentials import CredentialHasher, CredentialKind, display_prefix
from storage.open import Storage

DEFAULT_ORG = "default"


async def accept_bootstrap_key(storage: Storage, hasher: CredentialHasher, value: str) -> bool:
    """Ensure org `default` exists and accepts `value` as a management key (idempotent)."""
    org, _ = await storage.orgs.get_or_create(DEFAULT_ORG)
    return await storage.orgs.ensure_management_key(
        org.id, hasher.hash(value), display_prefix(value)
    )


async def first_start_key(storage: Storage, hasher: CredentialHasher) -> str | None:
    """On an installation with no organization yet, create `default` and return a new
    management key for it (to print once); None otherwise."""
    if await storage.orgs.count() > 0:
        return None
    org, created = await storage.orgs.get_or_create(DEFAULT_ORG)
    if not created:
        return None
    credential = hasher.generate(CredentialKind.MANAGEMENT)
    await storage.orgs.add_management_key(org.id, credential)
    return credential.value
