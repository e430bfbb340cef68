"""Authentication and authorization over real HTTP: every 401 and 403 case, the credential
cache and its invalidation (on this instance and on another one), and last_used_at."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.credentials import CredentialEpochWatcher
from tests.gateway.keys_client import create_key, error_of
from tests.harness import OPERATOR_KEY, Gateway, gateway_config, running_gateway

KEY_ROUTES = [
    ("POST", "/v1/keys", {"name": "n"}),
    ("GET", "/v1/keys", None),
    ("GET", "/v1/keys/key_x", None),
    ("PATCH", "/v1/keys/key_x", {"name": "n"}),
    ("DELETE", "/v1/keys/key_x", None),
]


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "missing_api_key"),
        ({"Authorization": ""}, "missing_api_key"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "invalid_api_key"),
        ({"Authorization": "Bearer"}, "invalid_api_key"),
        ({"Authorization": "Bearer sk-not-ours"}, "invalid_api_key"),
        ({"Authorization": "Bearer service_sk_live_doesnotexist000000000000"}, "invalid_api_key"),
        ({"Authorization": "Bearer service_mgmt_doesnotexist0000000000000"}, "invalid_api_key"),
    ],
)
async def test_missing_or_invalid_credential_is_401(
    gateway: Gateway, headers: dict[str, str], code: str
) -> None:
    for method, path, body in KEY_ROUTES:
        r = await gateway.client.request(method, path, json=body, headers=headers)
        assert r.status_code == 401, (method, path)
        error = error_of(r)
        assert error["type"] == "authentication_error" and error["code"] == code


async def test_disabled_key_is_401_until_enabled(gateway: Gateway) -> None:
    key = await create_key(gateway, name="admin", scopes=["keys:manage"])
    assert (
        await gateway.client.get("/v1/keys", headers=gateway.auth(key["key"]))
    ).status_code == 200
    await gateway.client.patch(
        f"/v1/keys/{key['id']}", json={"is_active": False}, headers=gateway.auth()
    )
    r = await gateway.client.get("/v1/keys", headers=gateway.auth(key["key"]))
    assert r.status_code == 401 and error_of(r)["code"] == "key_disabled"
    await gateway.client.patch(
        f"/v1/keys/{key['id']}", json={"is_active": True}, headers=gateway.auth()
    )
    assert (
        await gateway.client.get("/v1/keys", headers=gateway.auth(key["key"]))
    ).status_code == 200


async def test_expired_key_is_401(gateway: Gateway) -> None:
    key = await create_key(gateway, name="brief", scopes=["keys:manage"])
    # Time moves on: put the expiry in the past as if it had passed.
    await gateway.runtime.storage.db.execute(
        "UPDATE api_keys SET expires_at = 1 WHERE id = :id", {"id": key["id"]}
    )
    gateway.runtime.auth.invalidate_all()
    r = await gateway.client.get("/v1/keys", headers=gateway.auth(key["key"]))
    assert r.status_code == 401 and error_of(r)["code"] == "key_expired"


async def test_deleted_key_is_401(gateway: Gateway) -> None:
    key = await create_key(gateway, name="gone", scopes=["keys:manage"])
    assert (
        await gateway.client.get("/v1/keys", headers=gateway.auth(key["key"]))
    ).status_code == 200
    await gateway.client.delete(f"/v1/keys/{key['id']}", headers=gateway.auth())
    r = await gateway.client.get("/v1/keys", headers=gateway.auth(key["key"]))
    assert r.status_code == 401 and error_of(r)["code"] == "key_revoked"


async def test_secret_key_without_keys_manage_is_403(gateway: Gateway) -> None:
    plain = await create_key(gateway, name="chat only", scopes=["chat:completions"])
    for method, path, body in KEY_ROUTES:
        r = await gateway.client.request(
            method, path, json=body, headers=gateway.auth(plain["key"])
        )
        assert r.status_code == 403, (method, path)
        assert error_of(r)["type"] == "permission_error"


async def test_secret_key_with_keys_manage_manages_its_org(gateway: Gateway) -> None:
    admin = await create_key(gateway, name="admin", scopes=["keys:manage"])
    made = await create_key(gateway, auth_key=admin["key"], name="made by key")
    listed = (await gateway.client.get("/v1/keys", headers=gateway.auth(admin["key"]))).json()
    assert {k["id"] for k in listed["data"]} == {admin["id"], made["id"]}
    r = await gateway.client.delete(f"/v1/keys/{made['id']}", headers=gateway.auth(admin["key"]))
    assert r.status_code == 200


async def test_key_without_scopes_holds_all_including_keys_manage(gateway: Gateway) -> None:
    everything = await create_key(gateway, name="all")
    assert (
        await gateway.client.get("/v1/keys", headers=gateway.auth(everything["key"]))
    ).status_code == 200


async def test_admin_actors_needs_the_operator_key(gateway: Gateway) -> None:
    key = await create_key(gateway, name="k")
    r = await gateway.client.get("/v1/admin/actors", headers=gateway.auth(key["key"]))
    assert r.status_code == 403
    r = await gateway.client.get("/v1/admin/actors", headers=gateway.auth())
    assert r.status_code == 403  # an organization's management key: not the instance's operator
    assert (await gateway.client.get("/v1/admin/actors")).status_code == 401
    r = await gateway.client.get("/v1/admin/actors", headers=gateway.auth(OPERATOR_KEY))
    assert r.status_code == 200


async def test_authentication_is_served_from_the_cache(gateway: Gateway) -> None:
    key = await create_key(gateway, name="hot", scopes=["keys:manage"])
    auth = gateway.runtime.auth
    await gateway.client.get("/v1/keys", headers=gateway.auth(key["key"]))
    misses = auth.misses
    for _ in range(5):
        await gateway.client.get("/v1/keys", headers=gateway.auth(key["key"]))
    assert auth.misses == misses
    assert auth.hits >= 5


async def test_last_used_at_is_recorded(gateway: Gateway) -> None:
    key = await create_key(gateway, name="used", scopes=["keys:manage"])
    listed = (await gateway.client.get("/v1/keys", headers=gateway.auth())).json()
    assert listed["data"][0]["last_used_at"] is None
    await gateway.client.get("/v1/keys", headers=gateway.auth(key["key"]))
    await gateway.runtime.last_used.flush()
    listed = (await gateway.client.get("/v1/keys", headers=gateway.auth())).json()
    assert listed["data"][0]["last_used_at"] is not None


async def test_change_on_one_instance_reaches_another(database_url: str, tmp_path: Path) -> None:
    """Two instances on one database: a key deleted through A stops working on B as soon as
    B's epoch watcher polls (within a second in production; polled by hand here)."""
    config_a = gateway_config(database_url, tmp_path / "a")
    shared = {"GATEWAY_MASTER_KEY": _b64(config_a.master_key)}
    config_b = gateway_config(database_url, tmp_path / "b", **shared)
    async with running_gateway(config_a) as a, running_gateway(config_b) as b:
        key = await create_key(a, name="shared", scopes=["keys:manage"])
        assert (await b.client.get("/v1/keys", headers=b.auth(key["key"]))).status_code == 200
        await a.client.delete(f"/v1/keys/{key['id']}", headers=a.auth())
        # B still has it cached until its watcher notices the epoch moved.
        assert (await b.client.get("/v1/keys", headers=b.auth(key["key"]))).status_code == 200
        watcher = b.runtime.supervisor.get("credential-epoch-watcher")
        assert isinstance(watcher, CredentialEpochWatcher)
        assert await watcher.poll_once() is True
        r = await b.client.get("/v1/keys", headers=b.auth(key["key"]))
        assert r.status_code == 401 and error_of(r)["code"] == "key_revoked"


def _b64(raw: bytes | None) -> str:
    import base64

    assert raw is not None
    return base64.b64encode(raw).decode()
