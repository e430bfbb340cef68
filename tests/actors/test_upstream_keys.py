"""The upstream client sends the configured provider key, or the one given for a call
(bring-your-own-key), in each provider's header; `get_json` checks a key with `GET models`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from actors.upstream import UpstreamClient
from bench.upstream import UpstreamServer, serve_upstream
from protocol.errors import UpstreamStatusError

CHAT = b'{"model": "sim-small", "messages": [{"role": "user", "content": "hi"}], "stream": true}'
MESSAGES = (
    b'{"model": "claude-haiku", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}'
)


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> UpstreamServer:
    started: UpstreamServer = await nursery.start(serve_upstream)
    return started


@pytest.fixture
async def openai(upstream: UpstreamServer) -> AsyncIterator[UpstreamClient]:
    client = _client("openai", upstream)
    yield client
    await client.aclose()


@pytest.fixture
async def anthropic(upstream: UpstreamServer) -> AsyncIterator[UpstreamClient]:
    client = _client("anthropic", upstream)
    yield client
    await client.aclose()


def _client(kind: str, upstream: UpstreamServer) -> UpstreamClient:
    return UpstreamClient(
        kind,
        kind,
        f"{upstream.url}/v1",
        "sk-configured",
        max_connections=4,
        max_keepalive_connections=4,
        connect_timeout_s=5,
        read_timeout_s=5,
        max_response_bytes=1 << 20,
    )


async def test_openai_kind_sends_the_configured_or_the_given_key(
    openai: UpstreamClient, upstream: UpstreamServer
) -> None:
    await openai.post_json("embeddings", b'{"model": "e", "input": "x"}')
    await openai.post_json("embeddings", b'{"model": "e", "input": "x"}', api_key="sk-org-own")
    async with openai.stream("chat/completions", CHAT, api_key="sk-org-stream") as response:
        await response.read(1 << 20)
    await openai.get_json("models", api_key="sk-org-check")
    await openai.get_json("models")
    sent = [(r.method, r.path, r.headers["authorization"]) for r in upstream.requests]
    assert sent == [
        ("POST", "/v1/embeddings", "Bearer sk-configured"),
        ("POST", "/v1/embeddings", "Bearer sk-org-own"),
        ("POST", "/v1/chat/completions", "Bearer sk-org-stream"),
        ("GET", "/v1/models", "Bearer sk-org-check"),
        ("GET", "/v1/models", "Bearer sk-configured"),
    ]
    assert all(r.headers["accept"] for r in upstream.requests)
    assert openai.stats.requests == 5 and openai.stats.in_flight == 0


async def test_anthropic_kind_sends_it_as_x_api_key(
    anthropic: UpstreamClient, upstream: UpstreamServer
) -> None:
    await anthropic.post_json("messages", MESSAGES, api_key="sk-ant-org")
    body = await anthropic.get_json("models", api_key="sk-ant-org")
    assert b"claude-haiku" in body
    for request in upstream.requests:
        assert request.headers["x-api-key"] == "sk-ant-org"
        assert request.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in request.headers


async def test_a_refused_key_is_an_upstream_status_error(
    openai: UpstreamClient, anthropic: UpstreamClient
) -> None:
    for client in (openai, anthropic):
        with pytest.raises(UpstreamStatusError) as caught:
            await client.get_json("models", api_key="sk-bad-key")
        assert caught.value.status == 401 and caught.value.provider == client.name
    with pytest.raises(UpstreamStatusError) as caught:
        await openai.post_json("embeddings", b'{"model": "e", "input": "x"}', api_key="sk-bad-1")
    assert caught.value.status == 401 and b"invalid_api_key" in caught.value.body
    assert openai.stats.errors == 2
