"""The `gateway` command: serve, migrate, admin, bench (README.md, docs/operations.md)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import trio
from msgspec.structs import replace

from actors.shared_holds import open_shared_holds
from gateway.bootstrap import accept_bootstrap_key, first_start_key
from gateway.config import Config, ConfigError, load_config, redact_url
from gateway.config.master_key import MasterKeyError, load_master_key
from gateway.credits.offline import offline_credit
from gateway.credits.refund_command import refund_command
from gateway.keyring.command import rotate_command
from gateway.logs import setup_logging
from gateway.management_keys import management_keys_command
from gateway.provider_keys.gateway_key import describe, warn_missing
from gateway.runtime import credential_hasher
from protocol.billing import ADJUSTMENT
from protocol.credentials import CredentialKind
from protocol.money import micros_to_usd, usd_to_micros
from storage.errors import StorageError, UniqueViolation
from storage.migrate import migrate
from storage.open import open_database, open_storage
from storage.orgs import PLANS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description="OpenAI-compatible model gateway")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the server until SIGINT/SIGTERM")
    serve.add_argument("--config", help="TOML file (default: $GATEWAY_CONFIG or ./gateway.toml)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int)

    mig = commands.add_parser("migrate", help="apply pending schema migrations (idempotent)")
    mig.add_argument("--config")

    commands.add_parser("bench", help="the bench suite (see bench/README.md)", add_help=False)

    admin = commands.add_parser("admin", help="administrative tasks")
    admin_commands = admin.add_subparsers(dest="admin_command", required=True)
    create_org = admin_commands.add_parser(
        "create-org", help="create an organization and print its management key once"
    )
    create_org.add_argument("name")
    create_org.add_argument("--plan", choices=PLANS, default="free")
    create_org.add_argument("--config")
    grant = admin_commands.add_parser(
        "grant-credits", help="add (or with a negative amount, remove) credit: an adjustment"
    )
    grant.add_argument("org", help="the organization's name or id")
    grant.add_argument("amount_usd", type=_usd_amount)
    grant.add_argument("--note", default="Credit granted by an operator")
    grant.add_argument("--config")
    refund = admin_commands.add_parser(
        "refund", help="refund a top-up through the payment processor (a `refund` row)"
    )
    refund.add_argument("txn_id", help="the top-up's transaction id (txn_…)")
    refund.add_argument("--amount", type=_usd_amount, help="USD (default: what is left)")
    refund.add_argument("--config")
    _management_keys_parser(admin_commands)
    rotate = admin_commands.add_parser(
        "rotate-master-key",
        help="re-seal every stored secret under a new master key (GATEWAY_NEW_MASTER_KEY or"
        " generated); restart every instance with it right after",
    )
    rotate.add_argument("--config")
    return parser


def _management_keys_parser(admin_commands: Any) -> None:
    mk = admin_commands.add_parser(
        "management-keys", help="an organization's management keys: create, list, revoke"
    )
    mk_commands = mk.add_subparsers(dest="mk_command", required=True)
    create = mk_commands.add_parser("create", help="add a management key and print it once")
    listing = mk_commands.add_parser("list", help="id, prefix, created, last used, status")
    revoke = mk_commands.add_parser("revoke", help="revoke a key: it stops working at once")
    for command in (create, listing, revoke):
        command.add_argument("org", help="the organization's name or id")
    revoke.add_argument("key_id", help="the key's id (mk_...), as `list` shows it")
    for command in (create, listing, revoke):
        command.add_argument("--config")


def _usd_amount(text: str) -> Decimal:
    try:
        amount = Decimal(text)
    except ArithmeticError:
        raise argparse.ArgumentTypeError(f"not an amount in USD: {text}") from None
    if not amount.is_finite() or amount == 0 or abs(amount) > 1_000_000_000:
        raise argparse.ArgumentTypeError("must be a non-zero amount of at most 1e9 USD")
    return amount


def _load(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    server = config.server
    if getattr(args, "host", None):
        server = replace(server, host=args.host)
    if getattr(args, "port", None) is not None:
        server = replace(server, port=args.port)
    if getattr(args, "workers", None) is not None:
        if args.workers < 1:
            raise ConfigError("command line", "--workers", "must be at least 1")
        server = replace(server, workers=args.workers)
    return replace(config, server=server)


async def _migrate(config: Config) -> int:
    async with open_database(config.database_url) as db:
        applied = await migrate(db)
    for m in applied:
        print(f"applied {m.version:04d}_{m.name}")
    if not applied:
        print("database is up to date")
    return 0


async def _create_org(config: Config, name: str, plan: str) -> int:
    master_key = load_master_key(config.master_key, config.data_dir)
    async with open_storage(config.database_url) as storage:
        hasher = await credential_hasher(storage, master_key)
        try:
            org = await storage.orgs.create(name, plan)
        except UniqueViolation:
            print(f"gateway: an organization named {name!r} already exists", file=sys.stderr)
            return 1
        credential = hasher.generate(CredentialKind.MANAGEMENT)
        await storage.orgs.add_management_key(org.id, credential, origin="create_org")
    print(f"organization {org.name} ({org.id}, plan {org.plan})")
    print(f"management key (shown once): {credential.value}")
    return 0


async def _grant_credits(config: Config, org_ref: str, amount: Decimal, note: str) -> int:
    """Written straight to the ledger (and to the shared balance in Redis when configured);
    instances without Redis see it within their balance TTL (a second)."""
    async with open_storage(config.database_url) as storage:
        org = await storage.orgs.get(org_ref) or await storage.orgs.get_by_name(org_ref)
        if org is None:
            print(f"gateway: no organization named or with id {org_ref!r}", file=sys.stderr)
            return 1
        async with open_shared_holds(config.redis_url) as shared:
            credit = offline_credit(storage.ledger, shared)
            txn = await credit(org.id, ADJUSTMENT, usd_to_micros(amount), note)
    print(f"{txn.id}: {micros_to_usd(txn.amount_micros):+.6f} USD to {org.name} ({org.id})")
    print(f"balance: {micros_to_usd(txn.balance_after_micros):.6f} USD")
    return 0


async def _prepare_serving(config: Config) -> str | None:
    """Migrate, accept the bootstrap key, create the first org on a new install."""
    master_key = load_master_key(config.master_key, config.data_dir)
    async with open_storage(config.database_url) as storage:
        hasher = await credential_hasher(storage, master_key)
        if config.bootstrap_management_key:
            await accept_bootstrap_key(storage, hasher, config.bootstrap_management_key)
            return None
        return await first_start_key(storage, hasher)


def _serve(config: Config) -> int:
    from gateway.server.serve import serve

    first_key = trio.run(_prepare_serving, config)
    providers = ", ".join(describe(p) for p in config.providers) or "none configured"
    warn_missing(config.providers)

    def announce(urls: list[str]) -> None:
        for url in urls:
            print(f"gateway listening on {url}", flush=True)
        print(f"database: {redact_url(config.database_url)}", flush=True)
        print(f"providers: {providers}", flush=True)
        if first_key:
            print(f"first start: management key for org 'default' (shown once): {first_key}")
        sys.stdout.flush()

    return serve(config, on_started=announce)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        # The bench suite has its own parser; imported lazily (plots need the bench extra).
        from bench.cli import main as bench_main

        return bench_main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        config = _load(args)
        setup_logging(config.log_level)
        if args.command == "serve":
            return _serve(config)
        if args.command == "migrate":
            return trio.run(_migrate, config)
        if args.command == "admin" and args.admin_command == "create-org":
            return trio.run(_create_org, config, args.name, args.plan)
        if args.command == "admin" and args.admin_command == "grant-credits":
            return trio.run(_grant_credits, config, args.org, args.amount_usd, args.note)
        if args.command == "admin" and args.admin_command == "refund":
            return trio.run(refund_command, config, args.txn_id, args.amount)
        if args.command == "admin" and args.admin_command == "management-keys":
            return trio.run(management_keys_command, config, args)
        if args.command == "admin" and args.admin_command == "rotate-master-key":
            return trio.run(rotate_command, config, os.environ)
    except Exception as exc:
        return _failed(exc)
    return 2


def _failed(exc: Exception) -> int:
    """The exit code and message of an expected failure; anything else goes on up. Raised
    inside `open_storage` on PostgreSQL it arrives wrapped in a group of one (trio-asyncio)."""
    leaf: BaseException = exc
    while isinstance(leaf, ExceptionGroup) and len(leaf.exceptions) == 1:
        leaf = leaf.exceptions[0]
    if isinstance(leaf, ConfigError):
        print(f"gateway: configuration error: {leaf}", file=sys.stderr)
        return 2
    if isinstance(leaf, MasterKeyError | StorageError):
        print(f"gateway: {leaf}", file=sys.stderr)
        return 1
    raise exc


if __name__ == "__main__":
    sys.exit(main())
