"""Console sessions across instances and restarts: two gateways on one database (as behind a
load balancer without sticky sessions) accept each other's sessions, a sign-out on one ends the
session on both, a restart keeps it, and an operator key removed from an instance's
configuration ends the operator sessions signed in with it."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from gateway.config import Config
from tests.console.session import Signed, sign_in
from tests.harness import OPERATOR_KEY, Gateway, gateway_config, running_gateway

OTHER_OPERATOR_KEY = "service_op_another-operator-key-9876543210"


def _config(database_url: str, data_dir: Path, master_key: bytes | None, **env: str) -> Config:
    """Instances of one deployment share the database and the master key."""
    if master_key is not None:
        env["GATEWAY_MASTER_KEY"] = base64.b64encode(master_key).decode()
    return gateway_config(database_url, data_dir, **env)


def on(gw: Gateway, signed: Signed) -> Signed:
    """The same browser session, its next request landing on `gw`."""
    return Signed(gw, signed.cookie, signed.csrf)


async def test_a_session_is_known_to_every_instance(database_url: str, tmp_path: Path) -> None:
    first = _config(database_url, tmp_path / "a", None)
    second = _config(database_url, tmp_path / "b", first.master_key)
    async with running_gateway(first) as a, running_gateway(second) as b:
        signed = await sign_in(a, a.management_key)
        there = on(b, signed)
        page = await there.get("/console/keys")
        assert page.status_code == 200, page.text
        # A change posted to B with the token A's page carried, its one-time secret shown by
        # A on the next page.
        r = await there.post("/console/keys", {"name": "made-on-b"})
        assert r.status_code == 303, r.text
        shown = await signed.get("/console/keys")
        secrets = re.findall(r'value="(service_sk_[^"]+)"', shown.text)
        assert len(secrets) == 1, shown.text
        assert secrets[0] not in (await there.get("/console/keys")).text  # shown once
        used = await a.client.get("/v1/keys", headers={"Authorization": f"Bearer {secrets[0]}"})
        assert used.status_code in (200, 403)
        # Signing out on B ends the session on A too.
        out = await there.post("/console/sign-out")
        assert out.status_code == 303
        for gw in (a, b):
            again = await on(gw, signed).get("/console/keys")
            assert again.status_code == 303 and again.headers["location"] == "/console/sign-in"
        assert await a.runtime.storage.console_sessions.count() == 0


async def test_a_session_survives_a_restart(database_url: str, tmp_path: Path) -> None:
    first = _config(database_url, tmp_path / "a", None)
    async with running_gateway(first) as a:
        signed = await sign_in(a, a.management_key)
        operator = await sign_in(a, OPERATOR_KEY)
    restarted = _config(database_url, tmp_path / "a", first.master_key)
    async with running_gateway(restarted) as again:
        for session in (signed, operator):
            page = await on(again, session).get("/console/overview")
            assert page.status_code == 200, page.text
        supervision = await on(again, operator).get("/console/supervision")
        assert supervision.status_code == 200, supervision.text
        assert (await on(again, signed).get("/console/supervision")).status_code == 403


async def test_removing_the_operator_key_ends_its_sessions(
    database_url: str, tmp_path: Path
) -> None:
    rotating = f"{OPERATOR_KEY},{OTHER_OPERATOR_KEY}"
    first = _config(database_url, tmp_path / "a", None, GATEWAY_OPERATOR_KEY=rotating)
    rotated = _config(
        database_url, tmp_path / "b", first.master_key, GATEWAY_OPERATOR_KEY=OTHER_OPERATOR_KEY
    )
    async with running_gateway(first) as a, running_gateway(rotated) as b:
        old = await sign_in(a, OPERATOR_KEY)
        new = await sign_in(a, OTHER_OPERATOR_KEY)
        org = await sign_in(a, a.management_key)
        # B no longer accepts the old key: the session made with it ends there at once, and
        # so (its row deleted) on A as well; the others go on on both.
        gone = await on(b, old).get("/console/overview")
        assert gone.status_code == 303 and gone.headers["location"] == "/console/sign-in"
        assert (await old.get("/console/overview")).status_code == 303
        for session in (new, org):
            for gw in (a, b):
                assert (await on(gw, session).get("/console/overview")).status_code == 200
