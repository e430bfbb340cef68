"""Bring-your-own-key on the inference routes, over real HTTP against the simulated upstream, on
every storage backend: requests to a provider the org has its own key for are sent with that key
(chat JSON and SSE, Anthropic, embeddings), cost nothing (a usage row of 0, never a 402, unpriced
models allowed), and a key the provider refuses at use is a 400 naming the provider with one
`provider_key.invalid` event (test_byok_invalid.py: what follows); deleting the key brings back
the gateway's key and billing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bench.upstream.behavior import RecordedRequest
from tests.gateway.keys_client import error_of
from tests.inference import UPSTREAM_KEY, Rig, chunks, inference_rig, ledger
from tests.waiting import wait_until

MESSAGES = [{"role": "user", "content": "hello there"}]
OWN_KEY = "sk-org-own-key-0001"
OWN_ANTHROPIC_KEY = "sk-ant-org-own-key-0002"
CREDIT = 100_000_000  # the rig's top-up, micro-USD


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


@pytest.fixture
async def broke_rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    """No credit at all."""
    async with inference_rig(database_url, tmp_path, credit_usd=None) as r:
        yield r


async def add_own_key(rig: Rig, provider: str, api_key: str) -> str:
    gw = rig.gateway
    r = await gw.client.post(
        "/v1/provider_keys", json={"provider": provider, "api_key": api_key}, headers=gw.auth()
    )
    assert r.status_code == 201, r.text
    key_id: str = r.json()["id"]
    return key_id


async def embed(rig: Rig, model: str = "embed") -> Any:
    return await rig.gateway.client.post(
        "/v1/embeddings", json={"model": model, "input": "hi"}, headers=rig.gateway.auth(rig.key)
    )


def last_request(rig: Rig, path: str) -> RecordedRequest:
    return [q for q in rig.upstream.requests if q.path == path][-1]


def bearer(request: RecordedRequest) -> str:
    return request.headers.get("authorization", "")


async def invalid_events(rig: Rig) -> list[Any]:
    events = await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id)
    return [e for e in events if e.type == "provider_key.invalid"]


async def test_chat_json_and_stream_use_the_orgs_key_and_cost_nothing(rig: Rig) -> None:
    await add_own_key(rig, "sim", OWN_KEY)
    r = await rig.chat({"model": "small", "messages": MESSAGES, "max_tokens": 5})
    assert r.status_code == 200, r.text
    assert bearer(last_request(rig, "/v1/chat/completions")) == f"Bearer {OWN_KEY}"
    body = {
        "model": "small",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    s = await rig.chat(body)
    assert s.status_code == 200, s.text
    assert [c["usage"] for c in chunks(s.text) if c.get("usage")]  # relayed as usual
    assert bearer(last_request(rig, "/v1/chat/completions")) == f"Bearer {OWN_KEY}"

    balance, rows = await ledger(rig, settled=2)
    assert balance == CREDIT
    # Newest first: the stream, then the JSON request; each a row of 0, for the record.
    assert [row.request_id for row in rows] == [
        s.headers["x-request-id"],
        r.headers["x-request-id"],
    ]
    assert all(row.amount_micros == 0 and row.model == "sim/sim-small" for row in rows)
    assert all(row.balance_after_micros == CREDIT for row in rows)
    assert "own provider key" in rows[0].description


async def test_anthropic_gets_the_orgs_key_as_x_api_key(rig: Rig) -> None:
    await add_own_key(rig, "claude", OWN_ANTHROPIC_KEY)
    r = await rig.chat({"model": "haiku", "messages": MESSAGES})
    assert r.status_code == 200, r.text
    s = await rig.chat({"model": "haiku", "messages": MESSAGES, "stream": True})
    assert s.status_code == 200, s.text
    sent = [q for q in rig.upstream.requests if q.path == "/v1/messages"]
    assert [q.headers.get("x-api-key") for q in sent] == [OWN_ANTHROPIC_KEY] * 2
    assert all("authorization" not in q.headers for q in sent)
    # Another provider keeps the gateway's key.
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    assert bearer(last_request(rig, "/v1/chat/completions")) == f"Bearer {UPSTREAM_KEY}"
    _, rows = await ledger(rig, settled=3)
    assert [row.amount_micros for row in rows[1:]] == [0, 0]
    assert rows[0].amount_micros < 0  # the request on the gateway's key is billed


async def test_embeddings_use_the_orgs_key(rig: Rig) -> None:
    await add_own_key(rig, "sim", OWN_KEY)
    r = await embed(rig)
    assert r.status_code == 200, r.text
    assert bearer(last_request(rig, "/v1/embeddings")) == f"Bearer {OWN_KEY}"
    balance, rows = await ledger(rig, settled=1)
    assert balance == CREDIT
    assert [(row.amount_micros, row.model) for row in rows] == [(0, "sim/sim-embed")]
    assert rows[0].request_id == r.headers["x-request-id"]


async def test_an_unpriced_model_needs_the_orgs_own_key(rig: Rig) -> None:
    r = await rig.chat({"model": "sim/unpriced", "messages": MESSAGES})
    assert r.status_code == 400 and error_of(r)["code"] == "model_price_unknown"
    r = await embed(rig, "sim/unpriced")
    assert r.status_code == 400 and error_of(r)["code"] == "model_price_unknown"
    assert rig.upstream.requests == []

    await add_own_key(rig, "sim", OWN_KEY)
    r = await rig.chat({"model": "sim/unpriced", "messages": MESSAGES})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "sim/unpriced"
    s = await rig.chat({"model": "sim/unpriced", "messages": MESSAGES, "stream": True})
    assert s.status_code == 200, s.text
    e = await embed(rig, "sim/unpriced")
    assert e.status_code == 200, e.text
    balance, rows = await ledger(rig, settled=3)
    assert balance == CREDIT
    assert [(row.amount_micros, row.model) for row in rows] == [(0, "sim/unpriced")] * 3
    # Another provider without the org's key still refuses it.
    r = await rig.chat({"model": "claude/unpriced", "messages": MESSAGES})
    assert r.status_code == 400 and error_of(r)["code"] == "model_price_unknown"


async def test_own_key_requests_need_no_credit(broke_rig: Rig) -> None:
    rig = broke_rig
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    assert r.status_code == 402  # the gateway's key: billed, and there is no credit
    await add_own_key(rig, "sim", OWN_KEY)
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    assert r.status_code == 200, r.text
    # Even below zero (an operator took credit away), the org's own key is never refused.
    gw = rig.gateway
    await gw.runtime.accountant.credit(gw.org_id, "adjustment", -1_000_000, "test")
    s = await rig.chat({"model": "small", "messages": MESSAGES, "stream": True})
    assert s.status_code == 200, s.text
    e = await embed(rig)
    assert e.status_code == 200, e.text
    balance, rows = await ledger(rig, settled=3)
    assert balance == -1_000_000
    assert [row.request_id for row in rows] == [
        e.headers["x-request-id"],
        s.headers["x-request-id"],
        r.headers["x-request-id"],
    ]
    assert [row.amount_micros for row in rows] == [0, 0, 0]


async def test_access_log_cost_is_zero(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    import json

    caplog.set_level("INFO", logger="gateway.access")
    await add_own_key(rig, "sim", OWN_KEY)
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    assert r.status_code == 200

    def entry() -> dict[str, Any] | None:
        for rec in caplog.records:
            if rec.name == "gateway.access":
                logged: dict[str, Any] = json.loads(rec.getMessage())
                if logged["route"] == "/v1/chat/completions":
                    return logged
        return None

    await wait_until(lambda: entry() is not None)
    logged = entry()
    assert logged is not None and logged["status"] == 200
    assert logged["cost_usd"] == 0 and logged["completion_tokens"] > 0


@pytest.mark.parametrize(
    ("provider", "model", "api_key"),
    [("sim", "small", OWN_KEY), ("claude", "haiku", OWN_ANTHROPIC_KEY)],
)
async def test_a_key_refused_at_use_is_a_400_naming_the_provider_and_one_event(
    rig: Rig, provider: str, model: str, api_key: str
) -> None:
    key_id = await add_own_key(rig, provider, api_key)
    rig.upstream.behavior.rejected_keys = frozenset({api_key})  # revoked at the provider
    for body in (
        {"model": model, "messages": MESSAGES},
        {"model": model, "messages": MESSAGES, "stream": True},
        {"model": model, "messages": MESSAGES},
    ):
        r = await rig.chat(body)
        assert r.status_code == 400, r.text
        assert r.headers["content-type"].startswith("application/json")
        error = error_of(r)
        assert error["code"] == "invalid_provider_key"
        assert error["type"] == "invalid_request_error"
        assert repr(provider) in error["message"]
        assert api_key not in r.text
    if provider == "sim":
        r = await embed(rig)
        assert r.status_code == 400 and error_of(r)["code"] == "invalid_provider_key"

    events = await invalid_events(rig)
    assert len(events) == 1
    assert events[0].data["provider_key_id"] == key_id
    assert events[0].data["provider"] == provider
    assert events[0].data["status"] == 401
    shown = await rig.gateway.client.get(f"/v1/provider_keys/{key_id}", headers=rig.gateway.auth())
    assert shown.json()["last_rejected_at"] is not None and shown.json()["status"] == "invalid"
    # Only the first request went upstream with the key: it was marked invalid then.
    path = "/v1/messages" if provider == "claude" else "/v1/chat/completions"
    assert len([q for q in rig.upstream.requests if q.path == path]) == 1
    # Not billed: nothing settled, nothing held.
    balance, rows = await ledger(rig, settled=0)
    assert (balance, rows) == (CREDIT, [])
    assert rig.gateway.runtime.accountant.stats.settled == 0
    credits = await rig.gateway.client.get("/v1/credits", headers=rig.gateway.auth())
    assert credits.json()["balance_usd"] == CREDIT / 1e6


async def test_the_gateways_own_key_refused_is_still_a_502(rig: Rig) -> None:
    """Only the org's own key being refused is the org's 400; the gateway's is a 502."""
    rig.upstream.behavior.rejected_keys = frozenset({UPSTREAM_KEY})
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    assert r.status_code == 502 and error_of(r)["code"] == "upstream_auth_failed"
    assert await invalid_events(rig) == []


async def test_deleting_the_key_brings_back_the_gateways_key_and_billing(rig: Rig) -> None:
    key_id = await add_own_key(rig, "sim", OWN_KEY)
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    assert r.status_code == 200
    assert bearer(last_request(rig, "/v1/chat/completions")) == f"Bearer {OWN_KEY}"
    gw = rig.gateway
    d = await gw.client.delete(f"/v1/provider_keys/{key_id}", headers=gw.auth())
    assert d.status_code == 200, d.text
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    assert r.status_code == 200
    assert bearer(last_request(rig, "/v1/chat/completions")) == f"Bearer {UPSTREAM_KEY}"
    balance, rows = await ledger(rig, settled=2)
    assert rows[0].request_id == r.headers["x-request-id"] and rows[0].amount_micros < 0
    assert rows[1].amount_micros == 0
    assert balance == CREDIT + rows[0].amount_micros
    r = await rig.chat({"model": "sim/unpriced", "messages": MESSAGES})
    assert r.status_code == 400 and error_of(r)["code"] == "model_price_unknown"
