"""Bring-your-own-key refused at use, on every route that calls a provider with the org's own
key: the refusal is mapped once, at the boundary (gateway/web/errors.py), the same way on
each — 400 `invalid_provider_key` naming the provider, JSON (a stream's too: nothing was sent
yet), one `provider_key.invalid` event, nothing charged, and the key marked invalid is not sent
again — and the gateway's own key refused is still the 502 it was. Chat (JSON and SSE),
embeddings and rerank are covered by test_byok_inference.py and rerank/test_rerank_billing.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.audio.support import AUDIO_TOML, field, file_part, form, post_form, wav
from tests.gateway.images.support import IMAGES_TOML
from tests.gateway.keys_client import error_of
from tests.inference import UPSTREAM_KEY, Rig, inference_rig, ledger

OWN_KEY = "sk-org-own-key-routes-0001"
CREDIT = 100_000_000  # the rig's top-up, micro-USD

Send = Callable[[Rig], Awaitable[Any]]


async def _json(rig: Rig, path: str, body: dict[str, Any]) -> Any:
    return await rig.gateway.client.post(path, json=body, headers=rig.gateway.auth(rig.key))


ROUTES: dict[str, Send] = {
    "speech": lambda rig: _json(
        rig, "/v1/audio/speech", {"model": "tts", "voice": "nova", "input": "hello"}
    ),
    "transcription": lambda rig: post_form(
        rig,
        "/v1/audio/transcriptions",
        form(field("model", "whisper"), file_part(wav(1))),
    ),
    "images": lambda rig: _json(rig, "/v1/images/generations", {"model": "dalle2", "prompt": "a"}),
    "responses": lambda rig: _json(rig, "/v1/responses", {"model": "small", "input": "hi"}),
    "responses stream": lambda rig: _json(
        rig, "/v1/responses", {"model": "small", "input": "hi", "stream": True}
    ),
}


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path, extra_toml=AUDIO_TOML + IMAGES_TOML) as r:
        yield r


async def invalid_events(rig: Rig) -> list[Any]:
    events = await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id)
    return [e for e in events if e.type == "provider_key.invalid"]


@pytest.mark.parametrize("route", list(ROUTES))
async def test_an_own_key_refused_at_use_is_mapped_the_same_on_every_route(
    rig: Rig, route: str
) -> None:
    gw = rig.gateway
    added = await gw.client.post(
        "/v1/provider_keys", json={"provider": "sim", "api_key": OWN_KEY}, headers=gw.auth()
    )
    assert added.status_code == 201, added.text
    rig.upstream.behavior.rejected_keys = frozenset({OWN_KEY})
    for _ in range(2):  # the first refusal marks the key invalid; the second never sends it
        r = await ROUTES[route](rig)
        assert r.status_code == 400, r.text
        assert r.headers["content-type"].startswith("application/json")
        error = error_of(r)
        assert (error["code"], error["type"]) == ("invalid_provider_key", "invalid_request_error")
        assert "'sim'" in error["message"] and OWN_KEY not in r.text
    events = await invalid_events(rig)
    assert [(e.data["provider"], e.data["status"]) for e in events] == [("sim", 401)]
    sent = [q for q in rig.upstream.requests if OWN_KEY in q.headers.get("authorization", "")]
    assert len([q for q in sent if q.path != "/v1/models"]) == 1  # the check, then one request
    assert await ledger(rig, 0) == (CREDIT, [])


@pytest.mark.parametrize("route", list(ROUTES))
async def test_the_gateways_own_key_refused_is_a_502_on_every_route(rig: Rig, route: str) -> None:
    rig.upstream.behavior.rejected_keys = frozenset({UPSTREAM_KEY})
    r = await ROUTES[route](rig)
    assert r.status_code == 502, r.text
    assert error_of(r)["code"] == "upstream_auth_failed"
    assert await invalid_events(rig) == []
