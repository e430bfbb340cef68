"""Instance-wide operator routes (`/v1/admin/*`) over real HTTP: only the operator credential
(`GATEWAY_OPERATOR_KEY`, `service_op_…`) opens them. An organization's management key used to
read the whole instance's supervision tree there — other organizations' webhook ids, org ids
and delivery errors with their target addresses."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.app import create_app
from gateway.console.app import WithConsole
from gateway.web import Auth, WebApp
from gateway.web.middleware import RequestMiddleware
from tests.gateway.keys_client import create_key
from tests.gateway.test_cli import BOOTSTRAP, _env, _gateway, _start, _stop
from tests.gateway.test_metrics_workers import ROOT, drain
from tests.harness import OPERATOR_KEY, Gateway, gateway_config, running_gateway
from tests.waiting import wait_until

ACTORS = "/v1/admin/actors"


def _error(r: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


async def test_organization_credentials_get_403_the_operator_key_the_tree(gateway: Gateway) -> None:
    r = await gateway.client.get(ACTORS, headers=gateway.auth())
    assert r.status_code == 403, r.text
    error = _error(r)
    assert (error["type"], error["code"]) == ("permission_error", "operator_key_required")
    assert "children" not in r.text and "webhook" not in r.text

    key = await create_key(gateway, name="everything")  # a secret key holding every scope
    r = await gateway.client.get(ACTORS, headers=gateway.auth(key["key"]))
    assert (r.status_code, _error(r)["code"]) == (403, "operator_key_required")

    r = await gateway.client.get(ACTORS, headers=gateway.auth(OPERATOR_KEY))
    assert r.status_code == 200, r.text
    tree = r.json()
    assert tree["pid"] == os.getpid()  # the test runs the gateway in its own process
    assert (tree["worker"], tree["workers"]) == (0, 1)
    assert tree["children"] and {"name", "state", "restarts", "inbox_depth"} <= set(tree)


async def test_no_or_unknown_credential_is_401(gateway: Gateway) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer"},
        {"Authorization": f"Basic {OPERATOR_KEY}"},
        {"Authorization": "Bearer service_op_" + "x" * 40},  # not a configured one
        {"Authorization": "Bearer " + OPERATOR_KEY + "x"},
        {"Authorization": "Bearer " + OPERATOR_KEY[:-1]},
        {"Authorization": "Bearer service_mgmt_" + "x" * 40},  # no such management key
        {"Authorization": "Bearer service_sk_live_" + "x" * 40},
        {"Authorization": "Bearer sk-something-else"},
    ):
        r = await gateway.client.get(ACTORS, headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert _error(r)["type"] == "authentication_error"


async def test_an_operator_key_opens_no_organization_route(gateway: Gateway) -> None:
    for path in ("/v1/keys", "/v1/files", "/v1/models"):
        r = await gateway.client.get(path, headers=gateway.auth(OPERATOR_KEY))
        assert r.status_code == 401, (path, r.text)


@pytest.mark.parametrize("backend", ["sqlite"])  # about credentials, not storage
async def test_several_operator_keys_for_rotation(database_url: str, tmp_path: Path) -> None:
    old, new = "service_op_" + "o" * 32, "service_op_" + "n" * 32
    config = gateway_config(database_url, tmp_path, GATEWAY_OPERATOR_KEY=f" {old} , {new} ")
    async with running_gateway(config) as gw:
        for key in (old, new):
            assert (await gw.client.get(ACTORS, headers=gw.auth(key))).status_code == 200
        assert (await gw.client.get(ACTORS, headers=gw.auth(OPERATOR_KEY))).status_code == 401


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_without_an_operator_key_the_operator_routes_are_disabled(
    database_url: str, tmp_path: Path
) -> None:
    config = gateway_config(database_url, tmp_path, GATEWAY_OPERATOR_KEY="")
    async with running_gateway(config) as gw:
        for headers in ({}, gw.auth(), gw.auth(OPERATOR_KEY), gw.auth("service_op_" + "z" * 40)):
            r = await gw.client.get(ACTORS, headers=headers)
            assert r.status_code == 403, (headers, r.text)
            error = _error(r)
            assert error["code"] == "operator_routes_disabled"
            assert "disabled" in error["message"] and "GATEWAY_OPERATOR_KEY" in error["message"]


async def test_every_admin_route_needs_the_operator_key(gateway: Gateway) -> None:
    """Built from the app's own router, so an admin route added later is held to it."""
    app = create_app(gateway.runtime)
    assert isinstance(app, RequestMiddleware) and isinstance(app.app, WithConsole)
    assert isinstance(app.app.app, WebApp)
    admin = [op for op in app.app.app.router.operations if op.path.startswith("/v1/admin/")]
    assert admin
    for op in admin:
        assert op.auth is Auth.OPERATOR, f"{op.method} {op.path}"
    doc = (await gateway.client.get("/openapi.json")).json()
    entry = doc["paths"][ACTORS]["get"]
    assert "operator" in entry["description"] and {"401", "403"} <= set(entry["responses"])


async def test_with_workers_the_answer_says_which_worker_answered(tmp_path: Path) -> None:
    """`gateway serve --workers 2`: each worker answers with its own tree, its pid and its
    index; new connections reach both (SO_REUSEPORT), and management keys get 403 on both."""
    args = _gateway("serve", "--workers", "2")
    env = _env(tmp_path, PYTHONPATH=str(ROOT), GATEWAY_OPERATOR_KEY=OPERATOR_KEY)
    process, url = await _start(args, env, tmp_path)
    seen: dict[int, int] = {}
    try:
        async with trio.open_nursery() as nursery:
            assert process.stdout is not None
            nursery.start_soon(drain, process.stdout)
            # A new connection per request, so that the kernel spreads them over both workers.
            async with httpx.AsyncClient(base_url=url, headers={"Connection": "close"}) as client:
                with trio.fail_after(60):
                    for _ in range(500):
                        r = await client.get(
                            ACTORS, headers={"Authorization": f"Bearer {BOOTSTRAP}"}
                        )
                        assert (r.status_code, _error(r)["code"]) == (403, "operator_key_required")
                        r = await client.get(
                            ACTORS, headers={"Authorization": f"Bearer {OPERATOR_KEY}"}
                        )
                        assert r.status_code == 200, r.text
                        tree = r.json()
                        assert tree["workers"] == 2 and tree["name"] == "root"
                        assert seen.setdefault(tree["worker"], tree["pid"]) == tree["pid"]
                        if len(seen) == 2:
                            break
            nursery.cancel_scope.cancel()
    finally:
        assert await _stop(process) == 0
    assert set(seen) == {0, 1} and len(set(seen.values())) == 2 and process.pid not in seen.values()


async def test_the_access_log_names_which_operator_key_never_the_key(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="gateway.access")
    await gateway.client.get(ACTORS, headers=gateway.auth(OPERATOR_KEY))
    await gateway.client.get(f"/v1/nothing/{OPERATOR_KEY}")  # a key pasted into a URL

    def lines() -> list[dict[str, Any]]:
        return [json.loads(r.getMessage()) for r in caplog.records if r.name == "gateway.access"]

    await wait_until(lambda: len(lines()) >= 2)
    actors, pasted = lines()[:2]
    fingerprint = hashlib.sha256(OPERATOR_KEY.encode()).hexdigest()[:12]
    assert (actors["status"], actors["key_id"], actors["org_id"]) == (
        200,
        f"operator:{fingerprint}",
        None,
    )
    assert pasted["path"] == "/v1/nothing/service_op_***"
    assert OPERATOR_KEY.removeprefix("service_op_") not in caplog.text
