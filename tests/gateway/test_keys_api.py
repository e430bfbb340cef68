"""The Keys API over real HTTP, on every storage backend: fields, defaults, list envelope,
PATCH semantics, deletion, and every error status the API lists for it (400/401/403/404/409)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from protocol.scopes import ALL_SCOPES
from tests.gateway.keys_client import create_key, error_of
from tests.harness import Gateway


def _future(days: int = 30) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).replace(microsecond=0).isoformat()


async def test_create_with_only_a_name_applies_defaults(gateway: Gateway) -> None:
    key = await create_key(gateway, name="ci")
    assert key["id"].startswith("key_")
    assert key["key"].startswith("service_sk_live_") and len(key["key"]) > 40
    assert key["key"].startswith(key["key_prefix"]) and key["key_prefix"] != key["key"]
    assert key["name"] == "ci"
    assert key["scopes"] == list(ALL_SCOPES)
    assert key["rate_limit_rpm"] is None
    assert key["daily_budget_usd"] is None and key["monthly_budget_usd"] is None
    assert key["allowed_models"] is None and key["expires_at"] is None
    assert key["is_active"] is True
    datetime.fromisoformat(key["created_at"])


async def test_create_echoes_every_field(gateway: Gateway) -> None:
    expires = _future()
    key = await create_key(
        gateway,
        name="full",
        scopes=["chat:completions", "models:read"],
        rate_limit_rpm=600,
        daily_budget_usd=12.5,
        monthly_budget_usd=300.1,
        allowed_models=["openai/gpt-4o-mini"],
        expires_at=expires,
    )
    assert key["scopes"] == ["chat:completions", "models:read"]
    assert key["rate_limit_rpm"] == 600
    assert key["daily_budget_usd"] == 12.5
    assert key["monthly_budget_usd"] == 300.1
    assert key["allowed_models"] == ["openai/gpt-4o-mini"]
    assert datetime.fromisoformat(key["expires_at"]) == datetime.fromisoformat(expires)


async def test_full_key_value_only_in_create_response(gateway: Gateway) -> None:
    key = await create_key(gateway, name="once")
    listed = await gateway.client.get("/v1/keys", headers=gateway.auth())
    one = await gateway.client.get(f"/v1/keys/{key['id']}", headers=gateway.auth())
    patched = await gateway.client.patch(
        f"/v1/keys/{key['id']}", json={"rate_limit_rpm": 5}, headers=gateway.auth()
    )
    for response in (listed, one, patched):
        assert response.status_code == 200
        assert key["key"] not in response.text
        assert "key" not in (
            response.json()["data"][0] if "data" in response.json() else response.json()
        )
    item = listed.json()["data"][0]
    assert item["key_prefix"] == key["key_prefix"]
    assert {"usage_today_usd", "usage_month_usd", "last_used_at"} <= set(item)
    assert item["usage_today_usd"] == 0 and item["usage_month_usd"] == 0


async def test_list_envelope_paging_and_active_filter(gateway: Gateway) -> None:
    ids = [(await create_key(gateway, name=f"k{i}"))["id"] for i in range(5)]
    await gateway.client.patch(
        f"/v1/keys/{ids[1]}", json={"is_active": False}, headers=gateway.auth()
    )
    r = await gateway.client.get("/v1/keys", headers=gateway.auth())
    body = r.json()
    assert body["total"] == 5 and body["limit"] == 50 and body["offset"] == 0
    assert body["has_more"] is False
    assert [k["id"] for k in body["data"]] == ids

    page = (await gateway.client.get("/v1/keys?limit=2&offset=2", headers=gateway.auth())).json()
    assert [k["id"] for k in page["data"]] == ids[2:4]
    assert page["total"] == 5 and page["has_more"] is True

    active = (await gateway.client.get("/v1/keys?active=true", headers=gateway.auth())).json()
    assert active["total"] == 4 and ids[1] not in [k["id"] for k in active["data"]]
    inactive = (await gateway.client.get("/v1/keys?active=false", headers=gateway.auth())).json()
    assert [k["id"] for k in inactive["data"]] == [ids[1]]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=x", "limit"),
        ("offset=-1", "offset"),
        ("active=maybe", "active"),
    ],
)
async def test_list_rejects_bad_query(gateway: Gateway, query: str, param: str) -> None:
    r = await gateway.client.get(f"/v1/keys?{query}", headers=gateway.auth())
    assert r.status_code == 400
    assert error_of(r)["param"] == param


async def test_patch_changes_only_included_fields(gateway: Gateway) -> None:
    key = await create_key(
        gateway, name="p", rate_limit_rpm=10, daily_budget_usd=1.0, allowed_models=["a/b"]
    )
    r = await gateway.client.patch(
        f"/v1/keys/{key['id']}",
        json={"name": "renamed", "daily_budget_usd": None, "monthly_budget_usd": 9.99},
        headers=gateway.auth(),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["name"] == "renamed"
    assert body["daily_budget_usd"] is None
    assert body["monthly_budget_usd"] == 9.99
    assert body["rate_limit_rpm"] == 10 and body["allowed_models"] == ["a/b"]
    fetched = (await gateway.client.get(f"/v1/keys/{key['id']}", headers=gateway.auth())).json()
    assert fetched == body


async def test_delete_then_gone(gateway: Gateway) -> None:
    key = await create_key(gateway, name="doomed")
    r = await gateway.client.delete(f"/v1/keys/{key['id']}", headers=gateway.auth())
    assert r.status_code == 200
    assert r.json()["id"] == key["id"] and r.json()["deleted"] is True
    for method in ("GET", "PATCH", "DELETE"):
        r = await gateway.client.request(
            method,
            f"/v1/keys/{key['id']}",
            json={} if method == "PATCH" else None,
            headers=gateway.auth(),
        )
        assert r.status_code == 404, method
        assert error_of(r)["code"] == "key_not_found"
    listed = (await gateway.client.get("/v1/keys", headers=gateway.auth())).json()
    assert listed["total"] == 0
    # The name of a deleted key is free again.
    await create_key(gateway, name="doomed")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": 5}, "name"),
        ({"name": "x", "scopes": "chat:completions"}, "scopes"),
        ({"name": "x", "scopes": ["nope"]}, "scopes[0]"),
        ({"name": "x", "rate_limit_rpm": 0}, "rate_limit_rpm"),
        ({"name": "x", "rate_limit_rpm": 1.5}, "rate_limit_rpm"),
        ({"name": "x", "daily_budget_usd": -1}, "daily_budget_usd"),
        ({"name": "x", "monthly_budget_usd": "ten"}, "monthly_budget_usd"),
        ({"name": "x", "allowed_models": [""]}, "allowed_models[0]"),
        ({"name": "x", "expires_at": "next week"}, "expires_at"),
        ({"name": "x", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "x", "colour": "blue"}, "colour"),
    ],
)
async def test_create_rejects_invalid_body(
    gateway: Gateway, body: dict[str, object], param: str
) -> None:
    r = await gateway.client.post("/v1/keys", json=body, headers=gateway.auth())
    assert r.status_code == 400, r.text
    error = error_of(r)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert (await gateway.client.get("/v1/keys", headers=gateway.auth())).json()["total"] == 0


@pytest.mark.parametrize("raw", [b"", b"{", b"[1, 2]", b"null", b"\xff\xfe"])
async def test_create_rejects_non_object_bodies(gateway: Gateway, raw: bytes) -> None:
    r = await gateway.client.post(
        "/v1/keys", content=raw, headers={**gateway.auth(), "Content-Type": "application/json"}
    )
    assert r.status_code == 400
    assert error_of(r)["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"is_active": "no"}, "is_active"),
        ({"name": None}, "name"),
        ({"scopes": ["x"]}, "scopes[0]"),
        ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"key": "abc"}, "key"),
    ],
)
async def test_patch_rejects_invalid_body(
    gateway: Gateway, body: dict[str, object], param: str
) -> None:
    key = await create_key(gateway, name="stay")
    r = await gateway.client.patch(f"/v1/keys/{key['id']}", json=body, headers=gateway.auth())
    assert r.status_code == 400
    assert error_of(r)["param"] == param
    unchanged = (await gateway.client.get(f"/v1/keys/{key['id']}", headers=gateway.auth())).json()
    assert unchanged["name"] == "stay" and unchanged["is_active"] is True


async def test_name_conflicts_are_409(gateway: Gateway) -> None:
    await create_key(gateway, name="taken")
    other = await create_key(gateway, name="other")
    r = await gateway.client.post("/v1/keys", json={"name": "taken"}, headers=gateway.auth())
    assert r.status_code == 409
    assert error_of(r)["param"] == "name"
    r = await gateway.client.patch(
        f"/v1/keys/{other['id']}", json={"name": "taken"}, headers=gateway.auth()
    )
    assert r.status_code == 409
    assert error_of(r)["code"] == "key_name_taken"
    # Renaming a key to its own name is no conflict.
    r = await gateway.client.patch(
        f"/v1/keys/{other['id']}", json={"name": "other"}, headers=gateway.auth()
    )
    assert r.status_code == 200


async def test_other_organizations_keys_are_404(gateway: Gateway) -> None:
    from protocol.credentials import CredentialKind

    storage = gateway.runtime.storage
    rival = await storage.orgs.create("rival")
    rival_key = gateway.runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await storage.orgs.add_management_key(rival.id, rival_key)
    theirs = await create_key(gateway, auth_key=rival_key.value, name="theirs")
    for method in ("GET", "PATCH", "DELETE"):
        r = await gateway.client.request(
            method,
            f"/v1/keys/{theirs['id']}",
            json={"name": "mine"} if method == "PATCH" else None,
            headers=gateway.auth(),
        )
        assert r.status_code == 404, method
    assert (await gateway.client.get("/v1/keys", headers=gateway.auth())).json()["total"] == 0
    still = await gateway.client.get(
        f"/v1/keys/{theirs['id']}", headers=gateway.auth(rival_key.value)
    )
    assert still.json()["name"] == "theirs"


async def test_key_events_are_written_to_the_outbox(gateway: Gateway) -> None:
    key = await create_key(gateway, name="evented")
    await gateway.client.patch(
        f"/v1/keys/{key['id']}", json={"rate_limit_rpm": 9}, headers=gateway.auth()
    )
    await gateway.client.delete(f"/v1/keys/{key['id']}", headers=gateway.auth())
    events = await gateway.runtime.storage.events.list_for_org(gateway.org_id)
    assert [e.type for e in events] == ["key.created", "key.updated", "key.deleted"]
    assert all(e.id.startswith("evt_") and e.data["key_id"] == key["id"] for e in events)
    assert events[1].data["changed"] == ["rate_limit_rpm"]
