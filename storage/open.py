"""Open a database from its URL, and the `Storage` facade routes and actors are given."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from storage.console_sessions import ConsoleSessionRepository
from storage.database import Database
from storage.events import EventRepository
from storage.files import FileRepository
from storage.fine_tuned_models import FineTunedModelRepository
from storage.fine_tuning import FineTuningRepository
from storage.idempotency import IdempotencyRepository
from storage.images import ImageRepository
from storage.keyring import KeyringRepository
from storage.keys import KeyRepository
from storage.ledger import LedgerRepository
from storage.migrate import migrate
from storage.orgs import OrgRepository
from storage.payments import PaymentRecords
from storage.postgres import open_postgres
from storage.provider_keys import ProviderKeyRepository
from storage.responses import ResponseRepository
from storage.sqlite import open_sqlite
from storage.usage import UsageRepository
from storage.webhooks import WebhookRepository


@dataclass(frozen=True)
class Storage:
    db: Database
    orgs: OrgRepository
    keys: KeyRepository
    events: EventRepository
    files: FileRepository
    idempotency: IdempotencyRepository
    ledger: LedgerRepository
    payments: PaymentRecords
    provider_keys: ProviderKeyRepository
    webhooks: WebhookRepository
    keyring: KeyringRepository
    images: ImageRepository
    responses: ResponseRepository
    fine_tuning: FineTuningRepository
    fine_tuned_models: FineTunedModelRepository
    usage: UsageRepository
    console_sessions: ConsoleSessionRepository

    @classmethod
    def over(cls, db: Database) -> Storage:
        return cls(
            db=db,
            orgs=OrgRepository(db),
            keys=KeyRepository(db),
            events=EventRepository(db),
            files=FileRepository(db),
            idempotency=IdempotencyRepository(db),
            ledger=LedgerRepository(db),
            payments=PaymentRecords(db),
            provider_keys=ProviderKeyRepository(db),
            webhooks=WebhookRepository(db),
            keyring=KeyringRepository(db),
            images=ImageRepository(db),
            responses=ResponseRepository(db),
            fine_tuning=FineTuningRepository(db),
            fine_tuned_models=FineTunedModelRepository(db),
            usage=UsageRepository(db),
            console_sessions=ConsoleSessionRepository(db),
        )


def sqlite_path(url: str) -> str:
    """`sqlite:///var/gateway.db` (relative) or `sqlite:////abs/path.db` -> a file path."""
    path = url.removeprefix("sqlite:///")
    return path or ":memory:"


@asynccontextmanager
async def open_database(
    url: str,
    *,
    server_settings: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> AsyncIterator[Database]:
    """The database behind `url`; closed when the block exits. `timeout_s` bounds every call
    (Database.timeout_s), the first connect included."""
    if url.startswith("sqlite:///"):
        db = open_sqlite(sqlite_path(url), timeout_s=timeout_s)
        try:
            yield db
        finally:
            await db.aclose()
    elif url.startswith(("postgresql://", "postgres://")):
        async with open_postgres(url, server_settings=server_settings, timeout_s=timeout_s) as pg:
            yield pg
    else:
        raise ValueError(f"unsupported database URL scheme: {url.split(':', 1)[0]!r}")


@asynccontextmanager
async def open_storage(
    url: str, *, apply_migrations: bool = True, timeout_s: float | None = None
) -> AsyncIterator[Storage]:
    """Storage over `url`. Migrations run unbounded (they may take long); every later call is
    bounded by `timeout_s`."""
    async with open_database(url, timeout_s=timeout_s) as db:
        if apply_migrations:
            db.timeout_s = None
            try:
                await migrate(db)
            finally:
                db.timeout_s = timeout_s
        yield Storage.over(db)
