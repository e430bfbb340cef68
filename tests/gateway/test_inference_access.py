"""Who may call the inference routes: scopes, allowed models, key state, rate limits;
plus embeddings and the model list."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.gateway.keys_client import create_key, error_of
from tests.inference import Rig, inference_rig

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


async def test_scopes_are_enforced_per_route(rig: Rig) -> None:
    only_models = (await create_key(rig.gateway, name="m", scopes=["models:read"]))["key"]
    r = await rig.chat({"model": "small", "messages": MESSAGES}, key=only_models)
    assert r.status_code == 403
    r = await rig.gateway.client.post(
        "/v1/embeddings",
        json={"model": "embed", "input": "x"},
        headers=rig.gateway.auth(only_models),
    )
    assert r.status_code == 403
    assert (
        await rig.gateway.client.get("/v1/models", headers=rig.gateway.auth(only_models))
    ).status_code == 200
    chat_only = (await create_key(rig.gateway, name="c", scopes=["chat:completions"]))["key"]
    assert (
        await rig.gateway.client.get("/v1/models", headers=rig.gateway.auth(chat_only))
    ).status_code == 403
    assert (
        await rig.chat({"model": "small", "messages": MESSAGES, "max_tokens": 1}, key=chat_only)
    ).status_code == 200
    assert len(rig.upstream.requests) == 1


async def test_allowed_models_limits_use_and_listing(rig: Rig) -> None:
    key = (await create_key(rig.gateway, name="a", allowed_models=["small"]))["key"]
    assert (
        await rig.chat({"model": "small", "messages": MESSAGES, "max_tokens": 1}, key=key)
    ).status_code == 200
    assert (
        await rig.chat({"model": "sim/sim-small", "messages": MESSAGES, "max_tokens": 1}, key=key)
    ).status_code == 200
    r = await rig.chat({"model": "haiku", "messages": MESSAGES}, key=key)
    assert r.status_code == 403 and error_of(r)["code"] == "model_not_allowed"
    assert error_of(r)["param"] == "model"
    listed = (await rig.gateway.client.get("/v1/models", headers=rig.gateway.auth(key))).json()
    assert [m["id"] for m in listed["data"]] == ["small"]


async def test_inactive_expired_and_missing_keys_are_401(rig: Rig) -> None:
    gw = rig.gateway
    key = await create_key(gw, name="off")
    await gw.client.patch(f"/v1/keys/{key['id']}", json={"is_active": False}, headers=gw.auth())
    r = await rig.chat({"model": "small", "messages": MESSAGES}, key=key["key"])
    assert r.status_code == 401 and error_of(r)["code"] == "key_disabled"
    expired = await create_key(gw, name="old")
    await gw.runtime.storage.db.execute(
        "UPDATE api_keys SET expires_at = 1 WHERE id = :id", {"id": expired["id"]}
    )
    gw.runtime.auth.invalidate_all()
    r = await rig.chat({"model": "small", "messages": MESSAGES}, key=expired["key"])
    assert r.status_code == 401 and error_of(r)["code"] == "key_expired"
    r = await gw.client.post("/v1/chat/completions", json={"model": "small", "messages": MESSAGES})
    assert r.status_code == 401
    assert rig.upstream.requests == []


async def test_rate_limit_429_with_headers(rig: Rig) -> None:
    key = (await create_key(rig.gateway, name="slow", rate_limit_rpm=2))["key"]
    body = {"model": "small", "messages": MESSAGES, "max_tokens": 1}
    first = await rig.chat(body, key=key)
    assert first.status_code == 200
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert "x-ratelimit-reset-requests" in first.headers
    assert (await rig.chat(body, key=key)).status_code == 200
    refused = await rig.chat(body, key=key)
    assert refused.status_code == 429
    assert error_of(refused)["code"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert len(rig.upstream.requests) == 2


async def test_embeddings_are_relayed(rig: Rig) -> None:
    r = await rig.gateway.client.post(
        "/v1/embeddings",
        json={"model": "embed", "input": ["a b", "c"]},
        headers=rig.gateway.auth(rig.key),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "sim/sim-embed" and len(body["data"]) == 2
    assert rig.upstream.requests[-1].json()["model"] == "sim-embed"
    r = await rig.gateway.client.post(
        "/v1/embeddings", json={"model": "haiku", "input": "x"}, headers=rig.gateway.auth(rig.key)
    )
    assert r.status_code == 400 and error_of(r)["code"] == "unsupported_model"
    r = await rig.gateway.client.post(
        "/v1/embeddings", json={"model": "embed"}, headers=rig.gateway.auth(rig.key)
    )
    assert r.status_code == 400 and error_of(r)["param"] == "input"


async def test_models_list_and_retrieve(rig: Rig) -> None:
    auth = rig.gateway.auth(rig.key)
    listed = (await rig.gateway.client.get("/v1/models", headers=auth)).json()
    assert listed["object"] == "list"
    assert [(m["id"], m["owned_by"]) for m in listed["data"]] == [
        ("gone", "dead"),
        ("small", "sim"),
        ("embed", "sim"),
        ("haiku", "claude"),
    ]
    one = await rig.gateway.client.get("/v1/models/haiku", headers=auth)
    assert one.status_code == 200 and one.json()["id"] == "haiku"
    canonical = await rig.gateway.client.get("/v1/models/claude/claude-haiku", headers=auth)
    assert canonical.status_code == 200
    missing = await rig.gateway.client.get("/v1/models/nope", headers=auth)
    assert missing.status_code == 404 and error_of(missing)["code"] == "model_not_found"
    wrong = await rig.gateway.client.delete("/v1/models", headers=auth)
    assert wrong.status_code == 405


@pytest.mark.parametrize("backend", ["sqlite"])  # about the limiter store, not the database
async def test_rate_limiter_outage_fails_open(database_url: str, tmp_path: Path) -> None:
    async with inference_rig(
        database_url, tmp_path, GATEWAY_REDIS_URL="redis://127.0.0.1:1/0"
    ) as rig:
        key = (await create_key(rig.gateway, name="limited", rate_limit_rpm=1))["key"]
        body = {"model": "small", "messages": MESSAGES, "max_tokens": 1}
        for _ in range(3):
            r = await rig.chat(body, key=key)
            assert r.status_code == 200  # admitted without a limit while the store is down
            assert "x-ratelimit-limit-requests" not in r.headers
        assert rig.gateway.runtime.limiter.statistics()["unavailable"] == 3


@pytest.mark.parametrize("backend", ["sqlite"])  # about routing, not storage
async def test_a_provider_kind_without_a_translation_is_refused(
    database_url: str, tmp_path: Path
) -> None:
    from bench.upstream import serve_upstream
    from tests.harness import gateway_config, running_gateway

    async with trio.open_nursery() as nursery:
        upstream = await nursery.start(serve_upstream)
        toml = f"""
[[providers]]
name = "co"
kind = "cohere"
base_url = "{upstream.url}/v1"

[[models]]
id = "command"
provider = "co"
upstream = "command-r"
input_usd_per_mtok = 1
output_usd_per_mtok = 1
"""
        async with running_gateway(gateway_config(database_url, tmp_path, toml=toml)) as gw:
            key = (await create_key(gw, name="k"))["key"]
            r = await gw.client.post(
                "/v1/chat/completions",
                json={"model": "command", "messages": MESSAGES},
                headers=gw.auth(key),
            )
            assert r.status_code == 400 and error_of(r)["code"] == "unsupported_model"
        assert upstream.requests == []
        nursery.cancel_scope.cancel()
