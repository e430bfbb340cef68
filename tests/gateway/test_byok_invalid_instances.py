"""A provider key going bad with two gateway instances on one database (same master key, one
simulated upstream), on every storage backend: instances refused at once write one
`provider_key.invalid` event between them; an instance that never saw the refusal stops using
the key once the credential epoch moves; replacing the key through one instance is used by
both."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from bench.upstream import UpstreamServer, serve_upstream
from protocol.errors import APIError
from tests.gateway.keys_client import error_of
from tests.harness import Gateway, gateway_config, running_gateway
from tests.inference import inference_toml
from tests.waiting import wait_until_async

OWN_KEY = "sk-org-own-key-shared-0001"
NEW_KEY = "sk-org-own-key-shared-0002"
CHAT = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


@asynccontextmanager
async def two_gateways(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Gateway, Gateway, UpstreamServer, str]]:
    """Instances a and b, the upstream, and a secret key of a's organization (b serves it too:
    one database). Each instance made an organization of its own: the tests use a's, with
    a's management key on both."""
    async with trio.open_nursery() as nursery:
        upstream: UpstreamServer = await nursery.start(serve_upstream)
        toml = inference_toml(upstream.url)
        config_a = gateway_config(database_url, tmp_path / "a", toml=toml)
        assert config_a.master_key is not None
        master = base64.b64encode(config_a.master_key).decode()
        config_b = gateway_config(
            database_url, tmp_path / "b", toml=toml, GATEWAY_MASTER_KEY=master
        )
        async with running_gateway(config_a) as a, running_gateway(config_b) as b:
            r = await a.client.post("/v1/keys", json={"name": "all"}, headers=a.auth())
            yield a, b, upstream, r.json()["key"]
        nursery.cancel_scope.cancel()


async def chat(gw: Gateway, key: str, body: dict[str, Any] = CHAT) -> Any:
    return await gw.client.post("/v1/chat/completions", json=body, headers=gw.auth(key))


async def add_key(a: Gateway, api_key: str) -> Any:
    body = {"provider": "sim", "api_key": api_key}
    return await a.client.post("/v1/provider_keys", json=body, headers=a.auth())


def sent_with(upstream: UpstreamServer, api_key: str) -> int:
    return sum(
        q.headers.get("authorization") == f"Bearer {api_key}" and q.path != "/v1/models"
        for q in upstream.requests
    )


async def invalid_events(gw: Gateway, org_id: str) -> list[dict[str, Any]]:
    events = await gw.runtime.storage.events.list_for_org(org_id)
    return [e.data for e in events if e.type == "provider_key.invalid"]


async def refused_by(gw: Gateway, org_id: str) -> bool:
    """The instance's resolver (memory first) no longer answers the key."""
    try:
        await gw.runtime.provider_keys.lookup(org_id, "sim")
    except APIError as exc:
        return exc.code == "invalid_provider_key"
    return False


async def test_instances_refused_at_once_write_one_event(database_url: str, tmp_path: Path) -> None:
    async with two_gateways(database_url, tmp_path) as (a, b, upstream, key):
        key_id = (await add_key(a, OWN_KEY)).json()["id"]
        for gw in (a, b):  # each instance has the key cached
            assert (await chat(gw, key)).status_code == 200
        assert sent_with(upstream, OWN_KEY) == 2
        upstream.behavior.rejected_keys = frozenset({OWN_KEY})

        statuses: list[tuple[int, str]] = []

        async def send(gw: Gateway) -> None:
            r = await chat(gw, key)
            statuses.append((r.status_code, error_of(r)["code"]))

        async with trio.open_nursery() as nursery:
            for i in range(16):
                nursery.start_soon(send, (a, b)[i % 2])
        assert statuses == [(400, "invalid_provider_key")] * 16
        events = await invalid_events(a, a.org_id)
        assert [(e["provider_key_id"], e["status"]) for e in events] == [(key_id, 401)]

        # Both instances learnt it (their own refusal, or the epoch): never sent again.
        sent = sent_with(upstream, OWN_KEY)
        assert 3 <= sent <= 2 + 16
        for gw in (a, b, a, b):
            r = await chat(gw, key)
            assert r.status_code == 400 and "marked invalid" in error_of(r)["message"]
        assert sent_with(upstream, OWN_KEY) == sent
        assert len(await invalid_events(b, a.org_id)) == 1


async def test_an_instance_that_saw_no_refusal_stops_and_restarts_with_the_epoch(
    database_url: str, tmp_path: Path
) -> None:
    async with two_gateways(database_url, tmp_path) as (a, b, upstream, key):
        key_id = (await add_key(a, OWN_KEY)).json()["id"]
        for gw in (a, b):
            assert (await chat(gw, key)).status_code == 200
        upstream.behavior.rejected_keys = frozenset({OWN_KEY})
        assert (await chat(a, key)).status_code == 400  # only a is refused
        await wait_until_async(lambda: refused_by(b, a.org_id))  # the epoch moved: b forgot it
        r = await chat(b, key)
        assert r.status_code == 400 and error_of(r)["code"] == "invalid_provider_key"
        assert sent_with(upstream, OWN_KEY) == 3  # the two successes and a's refusal
        shown = await b.client.get(f"/v1/provider_keys/{key_id}", headers=a.auth())
        assert shown.json()["status"] == "invalid"

        # Replaced through a: b forgets the invalid state too, and uses the new key.
        assert (await add_key(a, NEW_KEY)).status_code == 200

        async def uses_new_key() -> bool:
            try:
                return await b.runtime.provider_keys.lookup(a.org_id, "sim") == NEW_KEY
            except APIError:
                return False

        await wait_until_async(uses_new_key)
        assert (await chat(b, key)).status_code == 200
        assert sent_with(upstream, NEW_KEY) == 1
        listed = await b.client.get("/v1/provider_keys", headers=a.auth())
        assert [k["status"] for k in listed.json()["data"]] == ["valid"]
        assert len(await invalid_events(a, a.org_id)) == 1
