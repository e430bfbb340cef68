"""Routing with the organization's own provider keys: a request that uses its own key only
goes to deployments of providers it has a key for, and a deployment whose provider refused the
org's key (marked invalid) is routed around, not answered 400."""

from __future__ import annotations

from pathlib import Path

from tests.gateway.routing.rig import Routed, routed_rig
from tests.gateway.routing.test_retries import TWO

EAST_KEY = "sk-org-east-0123456789"
WEST_KEY = "sk-org-west-0123456789"


async def _own_key(routed: Routed, provider: str, key: str) -> None:
    gw = routed.rig.gateway
    r = await gw.client.post(
        "/v1/provider_keys", json={"provider": provider, "api_key": key}, headers=gw.auth()
    )
    assert r.status_code in (200, 201), r.text


def _west_chats(routed: Routed) -> int:
    return sum(q.path == "/v1/chat/completions" for q in routed.west.requests)


def _keys_seen(routed: Routed) -> set[str]:
    return {
        q.headers["authorization"].removeprefix("Bearer ")
        for q in routed.east.requests + routed.west.requests
        if q.path == "/v1/chat/completions"
    }


async def test_own_key_requests_go_only_where_the_org_has_a_key(
    database_url: str, tmp_path: Path
) -> None:
    async with routed_rig(database_url, tmp_path, TWO.format(extra="")) as routed:
        await _own_key(routed, "east", EAST_KEY)  # none for west
        for _ in range(6):
            r = await routed.chat()
            assert r.status_code == 200 and r.headers["x-gateway-deployment"] == "east/sim-a"
        assert _keys_seen(routed) == {EAST_KEY} and not _west_chats(routed)


async def test_a_deployment_whose_provider_refused_the_orgs_key_is_routed_around(
    database_url: str, tmp_path: Path
) -> None:
    async with routed_rig(database_url, tmp_path, TWO.format(extra="")) as routed:
        await _own_key(routed, "east", EAST_KEY)
        await _own_key(routed, "west", WEST_KEY)
        routed.west.behavior.rejected_keys = frozenset({WEST_KEY})  # revoked at the provider
        west_seen = 0
        for _ in range(12):  # west refuses the first it gets, which goes on to east
            r = await routed.chat()
            assert r.status_code == 200 and r.headers["x-gateway-deployment"] == "east/sim-a"
            if _west_chats(routed) and not west_seen:
                west_seen = _west_chats(routed)
                assert r.headers["x-gateway-attempts"] == "2"
        assert west_seen == 1  # the org's key was marked invalid at the first refusal
        gw = routed.rig.gateway
        keys = (await gw.client.get("/v1/provider_keys", headers=gw.auth())).json()["data"]
        assert {k["provider"]: k["status"] for k in keys} == {"east": "valid", "west": "invalid"}
        for _ in range(4):
            r = await routed.chat()
            assert r.status_code == 200 and r.headers["x-gateway-deployment"] == "east/sim-a"
        assert _west_chats(routed) == west_seen  # never sent the refused key again
