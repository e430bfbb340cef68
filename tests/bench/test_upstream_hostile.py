"""The simulated upstream under hostile requests, over real sockets: a body it cannot read is
that request's 400, a failure inside one request is that request's 500 (or, outside any
request, the end of that connection), and the server goes on serving everyone else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from bench.upstream import UpstreamServer, dispatch, serve_upstream, server
from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.http import json_response
from bench.upstream.replies import Reply

CHAT = {"model": "sim-small", "messages": [{"role": "user", "content": "hello"}]}
DEEP = b"[" * 100_000 + b"]" * 100_000
# Each one crashed the whole server before: msgspec raises UnicodeDecodeError for a string
# that is not UTF-8 and RecursionError for nesting past its stack, outside DecodeError.
BODIES = {
    "0xff in a string": b'{"model":"a\xffb","messages":[],"input":"x","query":"q"}',
    "overlong in a string": b'{"model":"sim-small","input":"\xc0\xaf","query":"\xc0\xaf"}',
    "surrogate in UTF-8": b'{"model":"\xed\xa0\x80","messages":[{"role":"user","content":"x"}]}',
    "0xff in a message": b'{"model":"sim-small","messages":[{"role":"user","content":"a\xffb"}]}',
    "deep unknown field": b'{"model":"sim-small","extra":' + DEEP + b"}",
    "deep message": b'{"model":"sim-small","messages":[{"role":"user","content":' + DEEP + b"}]}",
    "bare 0xff": b"\xff\xfe",
}
PATHS = [
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/messages",
    "/v1/responses",
    "/v1/rerank",
    "/cohere/v1/rerank",
    "/v1/audio/speech",
    "/v1/images/generations",
    "/v1/moderations",
    "/v1/fine_tuning/jobs",
]


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> UpstreamServer:
    started: UpstreamServer = await nursery.start(serve_upstream)
    return started


@pytest.fixture
async def client(upstream: UpstreamServer) -> AsyncIterator[httpx.AsyncClient]:
    headers = {
        "authorization": "Bearer sk-test",
        "x-api-key": "sk-test",
        "anthropic-version": "2023-06-01",
    }
    async with httpx.AsyncClient(base_url=upstream.url, headers=headers, timeout=10) as c:
        yield c


async def _still_serves(upstream: UpstreamServer, client: httpx.AsyncClient) -> None:
    """The same keep-alive client and a new connection both get a completion."""
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    async with httpx.AsyncClient(base_url=upstream.url, timeout=10) as fresh:
        r = await fresh.post(
            "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-test"}
        )
    assert r.status_code == 200


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
async def test_unreadable_json_is_a_400_and_the_server_lives(
    upstream: UpstreamServer, client: httpx.AsyncClient, path: str, body: bytes
) -> None:
    r = await client.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()  # the provider's error shape, still JSON
    await _still_serves(upstream, client)


def test_the_route_list_is_every_json_route() -> None:
    json_routes = {p for p, methods in dispatch.ROUTES.items() if "POST" in methods}
    multipart = {
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/v1/images/edits",
        "/v1/images/variations",
    }
    assert json_routes - multipart == set(PATHS) - {"/v1/fine_tuning/jobs"}


async def test_a_failing_route_fails_its_request_only(
    upstream: UpstreamServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
        raise ValueError("a bug in one route")

    monkeypatch.setitem(dispatch.ROUTES, "/v1/broken", {"POST": broken})
    r = await client.post("/v1/broken", json={})
    assert r.status_code == 500
    assert "ValueError" in r.json()["error"]["message"]
    await _still_serves(upstream, client)


async def test_a_failing_connection_ends_that_connection_only(
    upstream: UpstreamServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0

    def fails_once(status: int, body: bytes, **kwargs: Any) -> bytes:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a bug while writing a response")
        return json_response(status, body, **kwargs)

    monkeypatch.setattr(server, "json_response", fails_once)
    with pytest.raises(httpx.RemoteProtocolError):  # closed without an answer
        await client.post("/v1/chat/completions", json=CHAT)
    await _still_serves(upstream, client)
