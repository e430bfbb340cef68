"""`gateway admin management-keys create|list|revoke ORG [KEY_ID]` (docs/operations.md).

A key's secret is printed once, by `create`; `list` shows ids, prefixes and times, never a
secret. `revoke` takes effect at once in the database and on running instances within their
credential poll (a second); the org's last active key cannot be revoked (create another first).
"""

from __future__ import annotations

import argparse
import sys

from gateway.config import Config
from gateway.config.master_key import load_master_key
from gateway.runtime import credential_hasher
from protocol.credentials import CredentialKind
from protocol.timefmt import to_iso
from storage.open import Storage, open_storage
from storage.orgs import ManagementKey, Org, Revoke


async def management_keys_command(config: Config, args: argparse.Namespace) -> int:
    async with open_storage(config.database_url) as storage:
        org = await storage.orgs.get(args.org) or await storage.orgs.get_by_name(args.org)
        if org is None:
            print(f"gateway: no organization named or with id {args.org!r}", file=sys.stderr)
            return 1
        if args.mk_command == "create":
            return await _create(config, storage, org)
        if args.mk_command == "list":
            return await _list(storage, org)
        return await _revoke(storage, org, args.key_id)


async def _create(config: Config, storage: Storage, org: Org) -> int:
    hasher = await credential_hasher(storage, load_master_key(config.master_key, config.data_dir))
    credential = hasher.generate(CredentialKind.MANAGEMENT)
    key_id = await storage.orgs.add_management_key(org.id, credential, origin="cli")
    print(f"{key_id} for {org.name} ({org.id})")
    print(f"management key (shown once): {credential.value}")
    return 0


async def _list(storage: Storage, org: Org) -> int:
    keys = await storage.orgs.list_management_keys(org.id)
    print(f"management keys of {org.name} ({org.id}):")
    rows = [("id", "prefix", "created", "last used", "origin", "status")]
    rows += [_row(key) for key in keys]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


def _row(key: ManagementKey) -> tuple[str, str, str, str, str, str]:
    status = "active" if key.revoked_at is None else f"revoked {to_iso(key.revoked_at)}"
    return (
        key.id,
        f"{key.key_prefix}...",
        to_iso(key.created_at) or "",
        to_iso(key.last_used_at) or "never",
        key.origin or "-",
        status,
    )


async def _revoke(storage: Storage, org: Org, key_id: str) -> int:
    outcome = await storage.orgs.revoke_management_key(org.id, key_id)
    if outcome is Revoke.NOT_FOUND:
        print(f"gateway: {org.name} has no management key {key_id!r}", file=sys.stderr)
        return 1
    if outcome is Revoke.LAST_ACTIVE:
        print(
            f"gateway: {key_id} is the last active management key of {org.name}: create"
            f" another first (`gateway admin management-keys create {org.name}`)",
            file=sys.stderr,
        )
        return 1
    if outcome is Revoke.ALREADY:
        print(f"{key_id} was already revoked")
        return 0
    print(f"{key_id} revoked (running instances refuse it within a second)")
    return 0
