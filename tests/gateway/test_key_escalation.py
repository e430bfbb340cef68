"""A secret key holding `keys:manage` grants no more than it holds (issue #19, item 6), over
real HTTP on every backend: what a key it creates inherits, what it may not give, that it
cannot widen itself, and that keys wider than it are out of its reach. Management keys keep
granting anything (protocol/key_grants.py has the rule itself)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio

from protocol.scopes import ALL_SCOPES
from tests.gateway.keys_client import create_key, error_of
from tests.harness import Gateway
from tests.waiting import wait_until_async

LIMITS: dict[str, Any] = {
    "scopes": ["keys:manage", "chat:completions"],
    "allowed_models": ["gpt-4o-mini"],
    "rate_limit_rpm": 60,
    "daily_budget_usd": 10.0,
    "monthly_budget_usd": 100.0,
}


def _expiry(days: int) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).replace(microsecond=0).isoformat()


async def _bound_admin(gw: Gateway) -> dict[str, Any]:
    return await create_key(gw, name="bound admin", expires_at=_expiry(30), **LIMITS)


async def _key(gw: Gateway, key_id: str) -> dict[str, Any]:
    r = await gw.client.get(f"/v1/keys/{key_id}", headers=gw.auth())
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


def _refused(r: Any, code: str, param: str) -> None:
    assert r.status_code == 403, r.text
    error = error_of(r)
    assert error["type"] == "permission_error"
    assert (error["code"], error["param"]) == (code, param), error


async def test_a_key_made_without_scopes_by_a_keys_manage_key_gets_only_its_scopes(
    gateway: Gateway,
) -> None:
    admin = await create_key(gateway, name="key admin", scopes=["keys:manage"])
    child = await create_key(gateway, auth_key=admin["key"], name="child")
    assert child["scopes"] == ["keys:manage"]
    auth = gateway.auth(child["key"])
    topup = await gateway.client.post("/v1/credits/topup", json={"amount_usd": 5}, headers=auth)
    assert topup.status_code == 403
    assert (await gateway.client.get("/v1/files", headers=auth)).status_code == 403
    assert (await gateway.client.get("/v1/keys", headers=auth)).status_code == 200


async def test_a_child_inherits_every_limit_it_does_not_set(gateway: Gateway) -> None:
    admin = await _bound_admin(gateway)
    child = await create_key(gateway, auth_key=admin["key"], name="child", rate_limit_rpm=5)
    for field in ("scopes", "allowed_models", "daily_budget_usd", "monthly_budget_usd"):
        assert child[field] == LIMITS[field], field
    assert child["rate_limit_rpm"] == 5
    assert child["expires_at"] == admin["expires_at"]
    explicit_nulls = await create_key(
        gateway,
        auth_key=admin["key"],
        name="nulls",
        scopes=None,
        daily_budget_usd=None,
        expires_at=None,
    )
    assert explicit_nulls["scopes"] == LIMITS["scopes"]
    assert explicit_nulls["daily_budget_usd"] == LIMITS["daily_budget_usd"]
    assert explicit_nulls["expires_at"] == admin["expires_at"]


async def test_a_child_wider_than_its_creator_is_403_naming_the_field(gateway: Gateway) -> None:
    admin = await _bound_admin(gateway)
    wider: list[tuple[dict[str, Any], str]] = [
        ({"scopes": ["chat:completions", "billing:write"]}, "scopes"),
        ({"allowed_models": ["gpt-4o"]}, "allowed_models"),
        ({"rate_limit_rpm": 61}, "rate_limit_rpm"),
        ({"daily_budget_usd": 10.01}, "daily_budget_usd"),
        ({"monthly_budget_usd": 1000}, "monthly_budget_usd"),
        ({"expires_at": _expiry(60)}, "expires_at"),
    ]
    for body, param in wider:
        r = await gateway.client.post(
            "/v1/keys", json={"name": f"wide {param}", **body}, headers=gateway.auth(admin["key"])
        )
        _refused(r, "privilege_escalation", param)
    listed = (await gateway.client.get("/v1/keys", headers=gateway.auth())).json()
    assert [k["id"] for k in listed["data"]] == [admin["id"]]  # nothing was created


async def test_a_key_cannot_widen_itself(gateway: Gateway) -> None:
    admin = await _bound_admin(gateway)
    before = await _key(gateway, admin["id"])
    widen: list[tuple[dict[str, Any], str]] = [
        ({"scopes": None}, "scopes"),
        ({"scopes": [*LIMITS["scopes"], "files"]}, "scopes"),
        ({"allowed_models": None}, "allowed_models"),
        ({"rate_limit_rpm": None}, "rate_limit_rpm"),
        ({"daily_budget_usd": 11}, "daily_budget_usd"),
        ({"monthly_budget_usd": None}, "monthly_budget_usd"),
        ({"expires_at": None}, "expires_at"),
        ({"expires_at": _expiry(90)}, "expires_at"),
    ]
    for body, param in widen:
        r = await gateway.client.patch(
            f"/v1/keys/{admin['id']}", json=body, headers=gateway.auth(admin["key"])
        )
        _refused(r, "privilege_escalation", param)
    after = await _key(gateway, admin["id"])
    assert after == before
    narrowed = await gateway.client.patch(
        f"/v1/keys/{admin['id']}",
        json={"rate_limit_rpm": 30, "name": "renamed"},
        headers=gateway.auth(admin["key"]),
    )
    assert narrowed.status_code == 200 and narrowed.json()["rate_limit_rpm"] == 30
    # Narrowed, it cannot go back up: its own row is the bound, not the copy it signed in with.
    back = await gateway.client.patch(
        f"/v1/keys/{admin['id']}", json={"rate_limit_rpm": 60}, headers=gateway.auth(admin["key"])
    )
    _refused(back, "privilege_escalation", "rate_limit_rpm")


async def test_a_key_changes_keys_within_it_up_to_its_own_limits(gateway: Gateway) -> None:
    admin = await _bound_admin(gateway)
    child = await create_key(gateway, auth_key=admin["key"], name="child", rate_limit_rpm=5)
    auth = gateway.auth(admin["key"])
    r = await gateway.client.patch(
        f"/v1/keys/{child['id']}", json={"rate_limit_rpm": 60, "is_active": False}, headers=auth
    )
    assert r.status_code == 200 and r.json()["rate_limit_rpm"] == 60
    r = await gateway.client.patch(
        f"/v1/keys/{child['id']}", json={"daily_budget_usd": None}, headers=auth
    )
    _refused(r, "privilege_escalation", "daily_budget_usd")
    assert (await gateway.client.delete(f"/v1/keys/{child['id']}", headers=auth)).status_code == 200


async def test_a_disabled_key_is_enabled_again_only_by_a_management_key(
    gateway: Gateway,
) -> None:
    # Found in review: an administrator disables a leaked key; a bound key as wide as it
    # turned it back on.
    admin = await _bound_admin(gateway)
    leaked = await create_key(
        gateway, auth_key=admin["key"], name="leaked", scopes=["chat:completions"]
    )  # within the bound key: it may disable it
    path, auth = f"/v1/keys/{leaked['id']}", gateway.auth(admin["key"])
    r = await gateway.client.patch(path, json={"is_active": False}, headers=gateway.auth())
    assert r.status_code == 200
    r = await gateway.client.patch(path, json={"is_active": True}, headers=auth)
    _refused(r, "privilege_escalation", "is_active")
    assert (await _key(gateway, leaked["id"]))["is_active"] is False
    # It may still disable and narrow keys within it, and change a disabled one otherwise.
    r = await gateway.client.patch(path, json={"rate_limit_rpm": 5}, headers=auth)
    assert r.status_code == 200 and r.json()["is_active"] is False
    r = await gateway.client.patch(path, json={"is_active": True}, headers=gateway.auth())
    assert r.status_code == 200 and r.json()["is_active"] is True


async def test_a_change_is_checked_against_the_row_it_overwrites(
    backend: str, gateway: Gateway
) -> None:
    """PostgreSQL reads committed rows without waiting: the key's row is locked while the
    change is checked and written, so a widening committed meanwhile is what gets checked."""
    if backend != "postgresql":
        pytest.skip("SQLite runs write transactions one at a time")
    admin = await _bound_admin(gateway)
    child = await create_key(gateway, auth_key=admin["key"], name="child")
    db = gateway.runtime.storage.db
    outcome: list[int] = []

    async def bound_disables_it() -> None:
        r = await gateway.client.patch(
            f"/v1/keys/{child['id']}", json={"is_active": False}, headers=gateway.auth(admin["key"])
        )
        outcome.append(r.status_code)

    async def waiting_for_a_lock() -> bool:
        return bool(
            await db.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        )

    async with trio.open_nursery() as nursery:
        async with db.transaction() as tx:  # an administrator widens the key, not committed yet
            await tx.execute(
                "UPDATE api_keys SET scopes = NULL WHERE id = :id", {"id": child["id"]}
            )
            nursery.start_soon(bound_disables_it)
            await wait_until_async(waiting_for_a_lock)
    assert outcome == [403]  # it was wider than the bound key by the time it was written
    assert (await _key(gateway, child["id"]))["is_active"] is True


async def test_keys_wider_than_the_caller_are_out_of_its_reach(gateway: Gateway) -> None:
    admin = await _bound_admin(gateway)
    production = await create_key(gateway, name="production")  # every scope, no limits
    auth = gateway.auth(admin["key"])
    for body in ({"is_active": False}, {"rate_limit_rpm": 1}, {"name": "mine now"}):
        r = await gateway.client.patch(f"/v1/keys/{production['id']}", json=body, headers=auth)
        _refused(r, "key_wider_than_caller", "scopes")
    r = await gateway.client.delete(f"/v1/keys/{production['id']}", headers=auth)
    _refused(r, "key_wider_than_caller", "scopes")
    kept = await _key(gateway, production["id"])
    assert kept["is_active"] is True and kept["name"] == "production"
    assert kept["rate_limit_rpm"] is None
    # Reading stays allowed: the list shows metadata only, never a key's value.
    assert (
        await gateway.client.get(f"/v1/keys/{production['id']}", headers=auth)
    ).status_code == 200


async def test_a_missing_key_is_still_404_for_a_bound_key(gateway: Gateway) -> None:
    admin = await _bound_admin(gateway)
    auth = gateway.auth(admin["key"])
    r = await gateway.client.patch("/v1/keys/key_missing", json={"scopes": None}, headers=auth)
    assert r.status_code == 404
    assert (await gateway.client.delete("/v1/keys/key_missing", headers=auth)).status_code == 404


async def test_management_keys_still_grant_anything(gateway: Gateway) -> None:
    admin = await _bound_admin(gateway)
    made = await create_key(gateway, name="all")
    assert made["scopes"] == list(ALL_SCOPES) and made["daily_budget_usd"] is None
    r = await gateway.client.patch(
        f"/v1/keys/{admin['id']}",
        json={"scopes": None, "daily_budget_usd": None, "expires_at": None},
        headers=gateway.auth(),
    )
    assert r.status_code == 200 and r.json()["scopes"] == list(ALL_SCOPES)
