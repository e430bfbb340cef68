"""No full credential value is stored in any database row or written to any log line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.bootstrap import accept_bootstrap_key
from protocol.credentials import CredentialKind
from storage.database import Database
from tests.gateway.keys_client import create_key
from tests.harness import Gateway


async def _all_cells(db: Database) -> list[str]:
    if db.dialect == "sqlite":
        tables = [
            r["name"] for r in await db.fetch("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
    else:
        tables = [
            r["table_name"]
            for r in await db.fetch(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema()"
            )
        ]
    assert "api_keys" in tables and "management_keys" in tables and "events" in tables
    cells: list[str] = []
    for table in tables:
        for row in await db.fetch(f"SELECT * FROM {table}"):
            cells += [str(v) for v in row.values()]
    return cells


async def test_no_key_value_in_database_or_logs(
    gateway: Gateway, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    runtime = gateway.runtime
    secrets = [gateway.management_key]
    admin = await create_key(gateway, name="admin", scopes=["keys:manage", "models:read"])
    secrets.append(admin["key"])
    plain = await create_key(gateway, auth_key=admin["key"], name="plain", scopes=["models:read"])
    secrets.append(plain["key"])
    # Use every credential, including failing uses, and change keys so events are written.
    await gateway.client.get("/v1/keys", headers=gateway.auth(admin["key"]))
    await gateway.client.get("/v1/keys", headers=gateway.auth(plain["key"]))  # 403
    await gateway.client.get(f"/v1/keys/{plain['key']}", headers=gateway.auth())  # key in a URL
    await gateway.client.patch(
        f"/v1/keys/{plain['id']}", json={"name": "p2"}, headers=gateway.auth()
    )
    await gateway.client.delete(f"/v1/keys/{plain['id']}", headers=gateway.auth())
    await gateway.client.get("/v1/keys", headers=gateway.auth(plain["key"]))  # 401 revoked
    bootstrap = "service_mgmt_bootstrap-value-for-the-test-0001"
    await accept_bootstrap_key(runtime.storage, runtime.hasher, bootstrap)
    secrets.append(bootstrap)
    new_mgmt = runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await runtime.storage.orgs.add_management_key(gateway.org_id, new_mgmt)
    secrets.append(new_mgmt.value)
    await runtime.last_used.flush()

    cells = await _all_cells(runtime.storage.db)
    # Everything the server side logged (the test's own HTTP client logs its URLs: not ours).
    server_records = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    log_text = "\n".join(rec.getMessage() for rec in server_records)
    assert "gateway.access" in {rec.name for rec in caplog.records}
    for secret in secrets:
        random_part = secret.split("_")[-1]
        assert not any(secret in cell or random_part in cell for cell in cells), "stored in clear"
        assert secret not in log_text and random_part not in log_text, "logged in clear"
