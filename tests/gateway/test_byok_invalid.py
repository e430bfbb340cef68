"""A provider key that goes bad at use (bring-your-own-key), over real HTTP against the simulated
upstream, on every storage backend: the first refusal marks it invalid with exactly one
`provider_key.invalid` event, and from then on the key is never sent upstream — requests get a
400 telling the org to replace it, or, when the org opted in, go with the gateway's key and are
billed. The Provider Keys API shows the state; storing a key again clears it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.gateway.keys_client import error_of
from tests.inference import UPSTREAM_KEY, Rig, inference_rig, ledger

MESSAGES = [{"role": "user", "content": "hello there"}]
OWN_KEY = "sk-org-own-key-going-bad-0001"
NEW_KEY = "sk-org-own-key-replaced-0002"
CREDIT = 100_000_000  # the rig's top-up, micro-USD
PATH = "/v1/provider_keys"
CHAT = {"model": "small", "messages": MESSAGES, "max_tokens": 5}


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


async def put_key(rig: Rig, api_key: str, **extra: Any) -> Any:
    gw = rig.gateway
    body = {"provider": "sim", "api_key": api_key, **extra}
    return await gw.client.post(PATH, json=body, headers=gw.auth())


async def shown(rig: Rig, key_id: str) -> dict[str, Any]:
    r = await rig.gateway.client.get(f"{PATH}/{key_id}", headers=rig.gateway.auth())
    assert r.status_code == 200, r.text
    item: dict[str, Any] = r.json()
    return item


async def invalid_events(rig: Rig) -> list[dict[str, Any]]:
    events = await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id)
    return [e.data for e in events if e.type == "provider_key.invalid"]


def sent_with(rig: Rig, api_key: str) -> int:
    """Inference requests (not the creation check) that reached the provider with `api_key`."""
    return sum(
        q.headers.get("authorization") == f"Bearer {api_key}" and q.path != "/v1/models"
        for q in rig.upstream.requests
    )


async def test_a_key_going_bad_is_marked_once_and_never_sent_again(rig: Rig) -> None:
    key_id = (await put_key(rig, OWN_KEY)).json()["id"]
    assert (await rig.chat(CHAT)).status_code == 200
    assert sent_with(rig, OWN_KEY) == 1
    rig.upstream.behavior.rejected_keys = frozenset({OWN_KEY})  # revoked at the provider

    first = await rig.chat(CHAT)  # sent, refused: the key is marked
    assert first.status_code == 400, first.text
    assert error_of(first)["code"] == "invalid_provider_key"
    assert sent_with(rig, OWN_KEY) == 2

    answers: list[Any] = []

    async def send(body: dict[str, Any]) -> None:
        answers.append(await rig.chat(body))

    async with trio.open_nursery() as nursery:
        for i in range(12):
            nursery.start_soon(send, {**CHAT, "stream": i % 2 == 0})
    embedded = await rig.gateway.client.post(
        "/v1/embeddings",
        json={"model": "embed", "input": "hi"},
        headers=rig.gateway.auth(rig.key),
    )
    for r in [*answers, embedded]:
        assert r.status_code == 400, r.text
        assert r.headers["content-type"].startswith("application/json")
        error = error_of(r)
        assert (error["type"], error["code"], error["param"]) == (
            "invalid_request_error",
            "invalid_provider_key",
            None,
        )
        assert "'sim'" in error["message"] and "POST /v1/provider_keys" in error["message"]
        assert "marked invalid" in error["message"] and "401" in error["message"]
        assert OWN_KEY not in r.text
    assert sent_with(rig, OWN_KEY) == 2  # never again after the refusal

    assert await invalid_events(rig) == [
        {
            "provider_key_id": key_id,
            "provider": "sim",
            "status": 401,
            "reason": "The provider answered 401 Unauthorized: it does not know the key"
            " (revoked, expired or mistyped).",
        }
    ]
    item = await shown(rig, key_id)
    assert item["status"] == "invalid" and item["invalidated_at"].endswith("Z")
    assert item["invalid_reason"].startswith("The provider answered 401")
    assert item["last_rejected_at"] == item["invalidated_at"]
    assert item["fallback_to_gateway_key"] is False
    listed = await rig.gateway.client.get(PATH, headers=rig.gateway.auth())
    assert listed.json()["data"] == [item]
    # Nothing billed: the one request that succeeded went with the org's key (a row of 0).
    balance, rows = await ledger(rig, settled=1)
    assert balance == CREDIT and [row.amount_micros for row in rows] == [0]


async def test_with_fallback_opted_in_the_gateways_key_is_used_and_billed(rig: Rig) -> None:
    created = await put_key(rig, OWN_KEY, fallback_to_gateway_key=True)
    assert created.status_code == 201, created.text
    key_id = created.json()["id"]
    assert created.json()["fallback_to_gateway_key"] is True
    rig.upstream.behavior.rejected_keys = frozenset({OWN_KEY})

    refused = await rig.chat(CHAT)  # this one was sent with the org's key: nothing to redo
    assert refused.status_code == 400 and error_of(refused)["code"] == "invalid_provider_key"
    r = await rig.chat(CHAT)
    assert r.status_code == 200, r.text
    s = await rig.chat({**CHAT, "stream": True})
    assert s.status_code == 200, s.text
    assert sent_with(rig, OWN_KEY) == 1
    assert sent_with(rig, UPSTREAM_KEY) == 2
    balance, rows = await ledger(rig, settled=2)
    assert [row.request_id for row in rows] == [
        s.headers["x-request-id"],
        r.headers["x-request-id"],
    ]
    assert all(row.amount_micros < 0 for row in rows)  # billed as the gateway's requests
    assert balance == CREDIT + sum(row.amount_micros for row in rows)

    assert len(await invalid_events(rig)) == 1
    item = await shown(rig, key_id)
    assert (item["status"], item["fallback_to_gateway_key"]) == ("invalid", True)


async def test_storing_a_key_again_clears_the_invalid_state(rig: Rig) -> None:
    key_id = (await put_key(rig, OWN_KEY)).json()["id"]
    rig.upstream.behavior.rejected_keys = frozenset({OWN_KEY})
    assert (await rig.chat(CHAT)).status_code == 400
    # The same revoked key is refused by the check: nothing stored, still invalid.
    again = await put_key(rig, OWN_KEY)
    assert again.status_code == 400 and error_of(again)["param"] == "api_key"
    assert (await shown(rig, key_id))["status"] == "invalid"
    assert (await rig.chat(CHAT)).status_code == 400

    replaced = await put_key(rig, NEW_KEY)
    assert replaced.status_code == 200, replaced.text
    item = replaced.json()
    assert item["id"] == key_id and item["key_hint"] == "…0002"
    assert (item["status"], item["invalidated_at"], item["invalid_reason"]) == ("valid", None, None)
    assert item["last_rejected_at"] is None
    assert await shown(rig, key_id) == item
    r = await rig.chat(CHAT)
    assert r.status_code == 200, r.text
    assert sent_with(rig, NEW_KEY) == 1 and sent_with(rig, OWN_KEY) == 1

    # The new key going bad in turn is a second event (one per key going bad).
    rig.upstream.behavior.rejected_keys = frozenset({NEW_KEY})
    for _ in range(3):
        assert (await rig.chat(CHAT)).status_code == 400
    assert sent_with(rig, NEW_KEY) == 2
    assert [e["status"] for e in await invalid_events(rig)] == [401, 401]


async def test_the_fallback_field_is_a_boolean_and_documented(rig: Rig) -> None:
    r = await put_key(rig, OWN_KEY, fallback_to_gateway_key="yes")
    assert r.status_code == 400 and error_of(r)["param"] == "fallback_to_gateway_key"
    doc = (await rig.gateway.client.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    create = schemas["ProviderKeyCreate"]["properties"]["fallback_to_gateway_key"]
    assert create["type"] == "boolean" and create.get("default") is False
    key = schemas["ProviderKey"]
    for field in ("status", "invalidated_at", "invalid_reason", "fallback_to_gateway_key"):
        assert field in key["properties"] and field in key["required"]
    assert sorted(key["properties"]["status"]["enum"]) == ["invalid", "valid"]
