"""Organizations that must exist at start: the bootstrap key's, and a first one on a new install.

GATEWAY_BOOTSTRAP_MANAGEMENT_KEY on a database that already exists: the same value changes
nothing; a new value is added to `default` and revokes the earlier bootstrap values (changing
the variable rotates the key; keys made otherwise are untouched); a value that was revoked (by
`gateway admin management-keys revoke`, or replaced) stays revoked, with a warning.
"""

from __future__ import annotations

import logging

from protocol.credentials import CredentialHasher, CredentialKind, display_prefix
from storage.open import Storage
from storage.orgs import Bootstrap, BootstrapResult

DEFAULT_ORG = "default"
VARIABLE = "GATEWAY_BOOTSTRAP_MANAGEMENT_KEY"

log = logging.getLogger("gateway.bootstrap")


async def accept_bootstrap_key(
    storage: Storage, hasher: CredentialHasher, value: str
) -> BootstrapResult:
    """Ensure org `default` exists and accepts `value` as a management key (idempotent)."""
    org, _ = await storage.orgs.get_or_create(DEFAULT_ORG)
    prefix = display_prefix(value)
    result = await storage.orgs.accept_bootstrap_key(org.id, hasher.hash(value), prefix)
    if result.outcome is Bootstrap.ADDED:
        log.info("%s (%s...) added to org %r", VARIABLE, prefix, DEFAULT_ORG)
    for key_id in result.revoked:
        log.warning("%s changed: the previous bootstrap key %s is revoked", VARIABLE, key_id)
    if result.outcome is Bootstrap.REVOKED:
        log.warning(
            "%s (%s...) was revoked and stays revoked: it is not accepted; set a new value"
            " or use `gateway admin management-keys create %s`",
            VARIABLE,
            prefix,
            DEFAULT_ORG,
        )
    elif result.outcome is Bootstrap.OTHER_ORG:
        log.warning("%s (%s...) is a key of another organization: left alone", VARIABLE, prefix)
    return result


async def first_start_key(storage: Storage, hasher: CredentialHasher) -> str | None:
    """On an installation with no organization yet, create `default` and return a new
    management key for it (to print once); None otherwise."""
    if await storage.orgs.count() > 0:
        return None
    org, created = await storage.orgs.get_or_create(DEFAULT_ORG)
    if not created:
        return None
    credential = hasher.generate(CredentialKind.MANAGEMENT)
    await storage.orgs.add_management_key(org.id, credential, origin="first_start")
    return credential.value
