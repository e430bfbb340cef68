"""Fallback models (gateway/inference/routing.py, admission.admit_fallbacks): the model's own
(`fallbacks` in [[models]]) and a request's (`"fallbacks"` in its body), tried in order once
every deployment before them failed; allowed_models, prices and billing apply to each."""

from __future__ import annotations

from pathlib import Path

from tests.gateway.keys_client import error_of
from tests.gateway.routing.rig import MESSAGES, routed_rig
from tests.inference import ledger

HA = """
[[models]]
id = "ha"
provider = "east"
upstream = "sim-a"
input_usd_per_mtok = 1
output_usd_per_mtok = 2
fallbacks = ["backup"]

[[models]]
id = "backup"
provider = "west"
upstream = "sim-b"
input_usd_per_mtok = 10
output_usd_per_mtok = 20
"""


async def test_the_models_own_fallback_answers_when_its_deployment_fails(
    database_url: str, tmp_path: Path
) -> None:
    async with routed_rig(database_url, tmp_path, HA) as routed:
        routed.east.behavior.fail_status = 500
        for stream in (False, True):
            r = await routed.chat(stream=stream)
            assert r.status_code == 200
            assert r.headers["x-gateway-deployment"] == "west/sim-b"
            assert r.headers["x-gateway-attempts"] == "2"  # east once, then the fallback
        assert r.text.endswith("data: [DONE]\n\n") and '"model":"west/sim-b"' in r.text
        assert routed.served() == (2, 2)
        body = routed.west.requests[0].json()
        assert body["model"] == "sim-b" and "fallbacks" not in body
        # Billed as the model that answered, at its price.
        _, rows = await ledger(routed.rig, settled=2)
        assert {row.model for row in rows} == {"west/sim-b"}


async def test_a_requests_own_fallbacks_are_tried_in_order_and_not_sent_upstream(
    database_url: str, tmp_path: Path
) -> None:
    async with routed_rig(database_url, tmp_path, HA) as routed:
        routed.east.behavior.fail_status = 503
        routed.west.behavior.fail_status = 503
        r = await routed.rig.chat(
            {"model": "gone", "messages": MESSAGES, "fallbacks": ["ha", "small"]}
        )
        # gone (connection refused), then the request's: ha (east 503), then small (the rig's
        # sim provider, on east's server: 503 too). A fallback's own fallbacks are not
        # followed: the chain is the model's and the request's.
        assert r.status_code == 502
        assert r.headers["x-gateway-attempts"] == "3"
        assert routed.served() == (2, 0)
        for request in routed.east.requests + routed.west.requests:
            assert "fallbacks" not in request.json()


async def test_an_unknown_or_forbidden_fallback_is_refused_before_any_call(
    database_url: str, tmp_path: Path
) -> None:
    async with routed_rig(database_url, tmp_path, HA) as routed:
        rig = routed.rig
        r = await rig.chat({"model": "ha", "messages": MESSAGES, "fallbacks": ["small", "nope"]})
        assert r.status_code == 404
        assert error_of(r)["param"] == "fallbacks[1]" and error_of(r)["code"] == "model_not_found"
        gw = rig.gateway
        limited = await gw.client.post(
            "/v1/keys", json={"name": "ha only", "allowed_models": ["ha"]}, headers=gw.auth()
        )
        key = limited.json()["key"]
        r = await rig.chat({"model": "ha", "messages": MESSAGES, "fallbacks": ["small"]}, key=key)
        assert r.status_code == 403 and error_of(r)["param"] == "fallbacks[0]"
        r = await rig.chat({"model": "ha", "messages": MESSAGES, "fallbacks": "small"})
        assert r.status_code == 400 and error_of(r)["param"] == "fallbacks"
        assert routed.served() == (0, 0)


async def test_a_configured_fallback_the_key_may_not_use_is_skipped(
    database_url: str, tmp_path: Path
) -> None:
    async with routed_rig(database_url, tmp_path, HA) as routed:
        gw = routed.rig.gateway
        limited = await gw.client.post(
            "/v1/keys", json={"name": "ha only", "allowed_models": ["ha"]}, headers=gw.auth()
        )
        routed.east.behavior.fail_status = 500
        r = await routed.rig.chat({"model": "ha", "messages": MESSAGES}, key=limited.json()["key"])
        assert r.status_code == 502  # backup was not tried: this key may not use it
        assert routed.served() == (3, 0)  # east alone, three times (no fallback left)


async def test_a_keys_budget_holds_for_the_fallbacks_too(database_url: str, tmp_path: Path) -> None:
    async with routed_rig(
        database_url, tmp_path, HA.replace('fallbacks = ["backup"]', "")
    ) as routed:
        gw = routed.rig.gateway
        created = await gw.client.post(
            "/v1/keys", json={"name": "capped", "daily_budget_usd": 0.005}, headers=gw.auth()
        )
        key = created.json()["key"]
        body = {"model": "ha", "messages": MESSAGES, "max_tokens": 1000}
        r = await routed.rig.chat(body, key=key)  # ha's hold: ~$0.002, within $0.005
        assert r.status_code == 200
        # With backup ($10 / $20 per Mtok) as a fallback the hold is backup's: ~$0.02.
        r = await routed.rig.chat({**body, "fallbacks": ["backup"]}, key=key)
        assert r.status_code == 402 and error_of(r)["code"] == "budget_exceeded"
        assert routed.served() == (1, 0)  # refused before any call
