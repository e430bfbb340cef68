"""The simulated upstream refuses chosen provider keys on every route, in each provider's shape,
and answers `GET /v1/models` for both providers (what the gateway checks a key with)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from bench.upstream import UpstreamBehavior, UpstreamServer, serve_upstream

CHAT = {"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {
    "model": "claude-haiku",
    "max_tokens": 5,
    "messages": [{"role": "user", "content": "hi"}],
}
OPENAI_CALLS = [
    ("POST", "/v1/chat/completions", CHAT),
    ("POST", "/v1/chat/completions", {**CHAT, "stream": True}),
    ("POST", "/v1/embeddings", {"model": "sim-embed", "input": "hi"}),
    ("GET", "/v1/models", None),
]
ANTHROPIC_CALLS = [
    ("POST", "/v1/messages", MESSAGES),
    ("POST", "/v1/messages", {**MESSAGES, "stream": True}),
    ("GET", "/v1/models", None),
]


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> UpstreamServer:
    started: UpstreamServer = await nursery.start(serve_upstream)
    return started


async def _call(
    upstream: UpstreamServer, method: str, path: str, body: Any, headers: dict[str, str]
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=upstream.url, timeout=10) as client:
        return await client.request(method, path, json=body, headers=headers)


def _openai(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _anthropic(key: str) -> dict[str, str]:
    return {"x-api-key": key, "anthropic-version": "2023-06-01"}


@pytest.mark.parametrize(("method", "path", "body"), OPENAI_CALLS)
async def test_openai_routes_refuse_keys_with_the_rejected_prefix(
    upstream: UpstreamServer, method: str, path: str, body: Any
) -> None:
    assert (await _call(upstream, method, path, body, _openai("sk-good"))).status_code == 200
    refused = await _call(upstream, method, path, body, _openai("sk-bad-123"))
    assert refused.status_code == 401
    error = refused.json()["error"]
    assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"


@pytest.mark.parametrize(("method", "path", "body"), ANTHROPIC_CALLS)
async def test_anthropic_routes_refuse_keys_with_the_rejected_prefix(
    upstream: UpstreamServer, method: str, path: str, body: Any
) -> None:
    assert (await _call(upstream, method, path, body, _anthropic("sk-ant-ok"))).status_code == 200
    refused = await _call(upstream, method, path, body, _anthropic("sk-bad-ant"))
    assert refused.status_code == 401
    assert refused.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    }


async def test_keys_can_be_revoked_while_running_and_the_prefix_turned_off(
    upstream: UpstreamServer,
) -> None:
    upstream.behavior.rejected_keys = frozenset({"sk-revoked"})
    for headers in (_openai("sk-revoked"), _anthropic("sk-revoked")):
        assert (await _call(upstream, "GET", "/v1/models", None, headers)).status_code == 401
    upstream.behavior = UpstreamBehavior(reject_key_prefix=None)
    ok = await _call(upstream, "POST", "/v1/chat/completions", CHAT, _openai("sk-bad-but-fine"))
    assert ok.status_code == 200


async def test_anthropic_models_list(upstream: UpstreamServer) -> None:
    response = await _call(upstream, "GET", "/v1/models", None, _anthropic("sk-ant-ok"))
    body = response.json()
    assert [m["id"] for m in body["data"]] == ["claude-haiku", "claude-sonnet"]
    assert body["data"][0]["type"] == "model" and body["has_more"] is False
    missing_version = await _call(upstream, "GET", "/v1/models", None, {"x-api-key": "sk-ant"})
    assert missing_version.status_code == 401
    assert "anthropic-version" in missing_version.json()["error"]["message"]
