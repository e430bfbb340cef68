"""Which storage backends the suite runs on, and fresh, isolated databases on each.

SQLite always; PostgreSQL when GATEWAY_TEST_DATABASE_URL is set. Every PostgreSQL test gets
its own schema (dropped afterwards), so tests never see each other's rows.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

from protocol.ids import random_token
from storage.open import open_database

POSTGRES_URL = os.environ.get("GATEWAY_TEST_DATABASE_URL") or None
REDIS_URL = os.environ.get("GATEWAY_TEST_REDIS_URL") or None
REQUIRE = os.environ.get("GATEWAY_TEST_REQUIRE_BACKENDS") == "1"

BACKENDS = ["sqlite"] + (["postgresql"] if POSTGRES_URL else [])


@asynccontextmanager
async def fresh_database_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """A URL to an empty database of `backend`, valid for the block."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'gateway.db'}"
        return
    assert POSTGRES_URL is not None
    schema = f"test_{random_token(12).lower()}"
    async with open_database(POSTGRES_URL) as admin:
        await admin.execute(f"CREATE SCHEMA {schema}")
        try:
            sep = "&" if "?" in POSTGRES_URL else "?"
            yield f"{POSTGRES_URL}{sep}{urlencode({'search_path': schema})}"
        finally:
            await admin.execute(f"DROP SCHEMA {schema} CASCADE")
