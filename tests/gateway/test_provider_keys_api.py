"""The Provider Keys API (bring-your-own-key) over real HTTP, on every storage backend, against
the simulated upstream: the key is checked with its provider before it is stored, never answered
or stored in clear, replaced per provider, deleted; every error case; events; and the
hot-path resolver seeing changes on this instance at once and on another one via the epoch."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from actors.credentials import CredentialEpochWatcher
from bench.upstream import UpstreamBehavior, serve_upstream
from protocol.credentials import CredentialKind
from tests.gateway.keys_client import create_key, error_of
from tests.gateway.test_secrets_at_rest import _all_cells
from tests.harness import Gateway, gateway_config, running_gateway
from tests.inference import Rig, inference_rig, inference_toml

GOOD = "sk-org-own-key-0001"
OTHER_GOOD = "sk-org-own-key-0002"
BAD = "sk-bad-org-key-9999"  # the simulated upstream refuses keys starting with sk-bad
PATH = "/v1/provider_keys"


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path, read_timeout_s=0.5) as r:
        yield r


async def _create(gw: Gateway, provider: str, api_key: str, auth: str | None = None) -> Any:
    body = {"provider": provider, "api_key": api_key}
    return await gw.client.post(PATH, json=body, headers=gw.auth(auth))


async def _event_types(gw: Gateway) -> list[str]:
    events = await gw.runtime.storage.events.list_for_org(gw.org_id)
    return [e.type for e in events if e.type.startswith("provider_key.")]


async def test_create_checks_the_key_with_the_provider_and_never_answers_it(rig: Rig) -> None:
    gw = rig.gateway
    r = await _create(gw, "sim", GOOD)
    assert r.status_code == 201, r.text
    created = r.json()
    assert set(created) == {
        "id",
        "object",
        "provider",
        "key_hint",
        "created_at",
        "updated_at",
        "last_rejected_at",
        "status",
        "invalidated_at",
        "invalid_reason",
        "fallback_to_gateway_key",
    }
    assert created["id"].startswith("pk_") and created["object"] == "provider_key"
    assert created["provider"] == "sim" and created["key_hint"] == "…0001"
    assert created["created_at"].endswith("Z") and created["last_rejected_at"] is None
    assert (created["status"], created["invalidated_at"], created["invalid_reason"]) == (
        "valid",
        None,
        None,
    )
    assert created["fallback_to_gateway_key"] is False
    assert GOOD not in r.text
    checks = [q for q in rig.upstream.requests if q.path == "/v1/models"]
    assert [(q.method, q.headers["authorization"]) for q in checks] == [("GET", f"Bearer {GOOD}")]

    listed = await gw.client.get(PATH, headers=gw.auth())
    one = await gw.client.get(f"{PATH}/{created['id']}", headers=gw.auth())
    assert listed.json() == {"object": "list", "data": [created], "total": 1}
    assert one.json() == created
    assert GOOD not in listed.text + one.text
    assert await _event_types(gw) == ["provider_key.created"]
    assert await gw.runtime.provider_keys.lookup(gw.org_id, "sim") == GOOD


async def test_anthropic_keys_are_checked_with_x_api_key(rig: Rig) -> None:
    r = await _create(rig.gateway, "claude", "sk-ant-org-key-abcd")
    assert r.status_code == 201, r.text
    check = rig.upstream.requests[-1]
    assert (check.method, check.path) == ("GET", "/v1/models")
    assert check.headers["x-api-key"] == "sk-ant-org-key-abcd"
    assert "authorization" not in check.headers
    assert r.json()["key_hint"] == "…abcd"


async def test_a_second_key_for_a_provider_replaces_the_first(rig: Rig) -> None:
    gw = rig.gateway
    first = (await _create(gw, "sim", GOOD)).json()
    assert await gw.runtime.provider_keys.lookup(gw.org_id, "sim") == GOOD
    r = await _create(gw, "sim", OTHER_GOOD)
    assert r.status_code == 200
    second = r.json()
    assert second["id"] == first["id"] and second["key_hint"] == "…0002"
    assert second["created_at"] == first["created_at"]
    # This instance's resolver dropped the old key at once.
    assert await gw.runtime.provider_keys.lookup(gw.org_id, "sim") == OTHER_GOOD
    await _create(gw, "claude", "sk-ant-org-key-abcd")
    listed = (await gw.client.get(PATH, headers=gw.auth())).json()
    assert [k["provider"] for k in listed["data"]] == ["claude", "sim"] and listed["total"] == 2
    assert await _event_types(gw) == [
        "provider_key.created",
        "provider_key.updated",
        "provider_key.created",
    ]


async def test_delete_forgets_the_key(rig: Rig) -> None:
    gw = rig.gateway
    created = (await _create(gw, "sim", GOOD)).json()
    assert await gw.runtime.provider_keys.lookup(gw.org_id, "sim") == GOOD
    r = await gw.client.delete(f"{PATH}/{created['id']}", headers=gw.auth())
    assert r.status_code == 200
    assert r.json() == {"id": created["id"], "object": "provider_key.deleted", "deleted": True}
    assert await gw.runtime.provider_keys.lookup(gw.org_id, "sim") is None
    for method in ("GET", "DELETE"):
        again = await gw.client.request(method, f"{PATH}/{created['id']}", headers=gw.auth())
        assert again.status_code == 404
        assert error_of(again)["code"] == "provider_key_not_found"
    assert (await gw.client.get(PATH, headers=gw.auth())).json()["total"] == 0
    events = await gw.runtime.storage.events.list_for_org(gw.org_id)
    deleted = [e for e in events if e.type == "provider_key.deleted"]
    assert [e.data for e in deleted] == [
        {"provider_key_id": created["id"], "provider": "sim", "key_hint": "0001"}
    ]


async def test_a_key_the_provider_refuses_is_400_and_not_stored(rig: Rig) -> None:
    gw = rig.gateway
    for provider in ("sim", "claude"):
        r = await _create(gw, provider, BAD)
        assert r.status_code == 400
        error = error_of(r)
        assert error["code"] == "invalid_provider_key" and error["param"] == "api_key"
        assert error["type"] == "invalid_request_error" and repr(provider) in error["message"]
        assert BAD not in r.text
    assert (await gw.client.get(PATH, headers=gw.auth())).json()["total"] == 0
    assert await _event_types(gw) == []
    # A refused replacement leaves the key in place.
    await _create(gw, "sim", GOOD)
    assert (await _create(gw, "sim", BAD)).status_code == 400
    assert await gw.runtime.provider_keys.lookup(gw.org_id, "sim") == GOOD


async def test_unknown_provider_is_400_without_calling_anyone(rig: Rig) -> None:
    before = len(rig.upstream.requests)
    r = await _create(rig.gateway, "nope", GOOD)
    assert r.status_code == 400
    error = error_of(r)
    assert error["param"] == "provider" and error["code"] == "unknown_provider"
    assert "claude, dead, sim" in error["message"]
    assert len(rig.upstream.requests) == before


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"provider": "sim"}, "api_key"),
        ({"api_key": GOOD}, "provider"),
        ({"provider": "sim", "api_key": ""}, "api_key"),
        ({"provider": "sim", "api_key": GOOD, "name": "x"}, "name"),
        ({"provider": "sim", "api_key": f" {GOOD}"}, "api_key"),
        ({"provider": "sim", "api_key": "sk-line\r\nX-Injected: 1"}, "api_key"),
        # Sent in a header: beyond Latin-1 it could not be encoded (a 500), and providers
        # issue keys of printable ASCII only.
        ({"provider": "sim", "api_key": "sk-日本語abcdefghijkl"}, "api_key"),
        ({"provider": "sim", "api_key": "sk-éabcdefghijklmnop"}, "api_key"),
        ({"provider": "sim", "api_key": "sk-\x85abcdefghijklmn"}, "api_key"),
        ({"provider": "sim", "api_key": "sk-in side-abcdefghij"}, "api_key"),
    ],
)
async def test_invalid_bodies_are_400_with_the_param(
    rig: Rig, body: dict[str, str], param: str
) -> None:
    r = await rig.gateway.client.post(PATH, json=body, headers=rig.gateway.auth())
    assert r.status_code == 400 and error_of(r)["param"] == param
    assert (await rig.gateway.client.get(PATH, headers=rig.gateway.auth())).json()["total"] == 0


async def test_provider_unreachable_failing_or_silent(rig: Rig) -> None:
    gw = rig.gateway
    r = await _create(gw, "dead", GOOD)
    assert r.status_code == 502 and error_of(r)["code"] == "upstream_unavailable"
    rig.upstream.behavior = UpstreamBehavior(fail_status=500)
    r = await _create(gw, "sim", GOOD)
    assert r.status_code == 502 and error_of(r)["code"] == "provider_key_unverified"
    rig.upstream.behavior = UpstreamBehavior(hang=True)  # the rig's read timeout is 0.5 s
    r = await _create(gw, "sim", GOOD)
    assert r.status_code == 504 and error_of(r)["code"] == "upstream_timeout"
    assert (await gw.client.get(PATH, headers=gw.auth())).json()["total"] == 0


async def test_auth_management_keys_only(rig: Rig) -> None:
    # A provider key decides where the organization's prompts go and who pays: a secret key
    # with `keys:manage` (once allowed here) could send them to an account of its choosing.
    gw = rig.gateway
    created = (await _create(gw, "sim", GOOD)).json()
    routes = [
        ("POST", PATH, {"provider": "sim", "api_key": GOOD}),
        ("GET", PATH, None),
        ("GET", f"{PATH}/{created['id']}", None),
        ("DELETE", f"{PATH}/{created['id']}", None),
    ]
    chat_only = await create_key(gw, name="chat", scopes=["chat:completions"])
    manager = await create_key(gw, name="manager", scopes=["keys:manage"])
    every_scope = await create_key(gw, name="every scope")
    for method, path, body in routes:
        missing = await gw.client.request(method, path, json=body)
        assert missing.status_code == 401 and error_of(missing)["code"] == "missing_api_key"
        for secret in (chat_only, manager, every_scope):
            denied = await gw.client.request(
                method, path, json=body, headers=gw.auth(secret["key"])
            )
            assert denied.status_code == 403 and error_of(denied)["type"] == "permission_error"
    for method, path, body in routes:
        r = await gw.client.request(method, path, json=body, headers=gw.auth())
        assert r.status_code == 200, (method, path, r.text)


async def test_another_organizations_key_is_not_found(rig: Rig) -> None:
    gw = rig.gateway
    created = (await _create(gw, "sim", GOOD)).json()
    runtime = gw.runtime
    other = await runtime.storage.orgs.create("other-org")
    credential = runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await runtime.storage.orgs.add_management_key(other.id, credential)
    theirs = credential.value
    for method in ("GET", "DELETE"):
        r = await gw.client.request(method, f"{PATH}/{created['id']}", headers=gw.auth(theirs))
        assert r.status_code == 404 and error_of(r)["code"] == "provider_key_not_found"
    assert (await gw.client.get(PATH, headers=gw.auth(theirs))).json()["total"] == 0
    assert await runtime.provider_keys.lookup(other.id, "sim") is None
    assert await runtime.provider_keys.lookup(gw.org_id, "sim") == GOOD


async def test_the_key_is_not_stored_or_logged_in_clear(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = rig.gateway
    values = [GOOD, OTHER_GOOD, "sk-ant-org-key-abcd"]
    await _create(gw, "sim", GOOD)
    await _create(gw, "sim", OTHER_GOOD)
    await _create(gw, "claude", values[2])
    await _create(gw, "sim", BAD)
    assert await gw.runtime.provider_keys.lookup(gw.org_id, "sim") == OTHER_GOOD
    assert await gw.runtime.provider_keys.report_invalid(gw.org_id, "sim", status=401)
    cells = await _all_cells(gw.runtime.storage.db)
    stored = await gw.runtime.storage.db.fetch("SELECT sealed_key FROM provider_keys")
    assert all(str(r["sealed_key"]).startswith("v1:") for r in stored) and len(stored) == 2
    server_logs = "\n".join(
        rec.getMessage() for rec in caplog.records if not rec.name.startswith(("httpx", "httpc"))
    )
    for value in [*values, BAD]:
        body = value[: -len("0001")]  # everything but the hint
        assert not any(body in cell for cell in cells), "stored in clear"
        assert body not in server_logs, "logged in clear"


async def test_a_change_on_one_instance_reaches_another(database_url: str, tmp_path: Path) -> None:
    """B's resolver drops what it cached once its epoch watcher polls (within a second in
    production; polled by hand here)."""
    async with trio.open_nursery() as nursery:
        upstream = await nursery.start(serve_upstream)
        toml = inference_toml(upstream.url)
        config_a = gateway_config(database_url, tmp_path / "a", toml=toml)
        assert config_a.master_key is not None
        shared = base64.b64encode(config_a.master_key).decode()
        config_b = gateway_config(
            database_url, tmp_path / "b", toml=toml, GATEWAY_MASTER_KEY=shared
        )
        async with running_gateway(config_a) as a, running_gateway(config_b) as b:
            on_b = b.runtime.provider_keys
            watcher = b.runtime.supervisor.get("credential-epoch-watcher")
            assert isinstance(watcher, CredentialEpochWatcher)
            await watcher.poll_once()
            assert await on_b.lookup(a.org_id, "sim") is None
            created = (await _create(a, "sim", GOOD)).json()
            await watcher.poll_once()
            assert await on_b.lookup(a.org_id, "sim") == GOOD  # opened with the shared master key
            await a.client.delete(f"{PATH}/{created['id']}", headers=a.auth())
            assert await watcher.poll_once() is True
            assert await on_b.lookup(a.org_id, "sim") is None
        nursery.cancel_scope.cancel()


async def test_openapi_documents_the_routes(rig: Rig) -> None:
    doc = (await rig.gateway.client.get("/openapi.json")).json()
    paths = doc["paths"]
    assert set(paths[PATH]) == {"get", "post"}
    assert set(paths[PATH + "/{provider_key_id}"]) == {"get", "delete"}
    create = paths[PATH]["post"]
    assert {"201", "400", "401", "403", "502", "504"} <= set(create["responses"])
    assert create["responses"]["200"] == create["responses"]["201"]  # 200: a key replaced
    ref = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    assert schema["required"] == ["provider", "api_key"]
    assert create["description"] == "Needs a management key."
