"""The response cache on chat completions and embeddings over real HTTP: exact hits (JSON, and
SSE replayed byte for byte), misses across organizations, opting out, what is not cached, and
what a hit is billed."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from protocol.billing import charge_micros, fee_percent
from tests.gateway.plugins.rig import chat_body, other_org_key, upstream_chats
from tests.inference import Rig, inference_rig, ledger
from tests.waiting import wait_until

pytestmark = pytest.mark.storage

CACHE = """
[cache]
enabled = true
"""


def stores(rig: Rig) -> int:
    deps = rig.gateway.runtime.areas
    plugins = _plugins(rig)
    assert plugins is not None and plugins.cache is not None, deps
    return plugins.cache.stats.stores


def _plugins(rig: Rig) -> Any:
    from gateway.inference.area import InferenceArea

    return rig.gateway.runtime.area(InferenceArea).deps.plugins


async def test_identical_requests_hit_json_and_sse_alike(database_url: str, tmp_path: Path) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=CACHE) as rig:
        body = chat_body("What is 2 + 2?", temperature=0)
        first = await rig.chat(body)
        assert first.status_code == 200 and first.headers["x-gateway-cache"] == "miss"
        await wait_until(lambda: stores(rig) == 1)
        second = await rig.chat(
            {**body, "messages": [{"content": "What is 2 + 2?", "role": "user"}]}
        )
        assert second.headers["x-gateway-cache"] == "hit"
        assert second.content == first.content
        assert len(upstream_chats(rig)) == 1
        # A stream is its own entry, replayed as the client first got it.
        streamed = {**body, "stream": True}
        one = await rig.chat(streamed)
        assert one.headers["x-gateway-cache"] == "miss"
        await wait_until(lambda: stores(rig) == 2)
        two = await rig.chat(streamed)
        assert two.headers["x-gateway-cache"] == "hit"
        assert two.content == one.content and two.headers["content-type"] == "text/event-stream"
        assert len(upstream_chats(rig)) == 2
        # Hits are billed at cache_hit_usd_per_mtok (0 by default), and say so.
        _, rows = await ledger(rig, settled=4)
        hits = [r for r in rows if "(cache hit)" in r.description]
        assert len(hits) == 2 and all(r.amount_micros == 0 for r in hits)
        assert all(r.amount_micros < 0 for r in rows if r not in hits)


async def test_what_is_not_cached(database_url: str, tmp_path: Path) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=CACHE) as rig:
        sampled = chat_body("Tell me a story")  # no temperature: not deterministic
        for _ in range(2):
            r = await rig.chat(sampled)
            assert r.headers["x-gateway-cache"] == "bypass"
        opted_out = chat_body("Tell me a story", temperature=0)
        r = await rig.gateway.client.post(
            "/v1/chat/completions",
            json=opted_out,
            headers={**rig.gateway.auth(rig.key), "Cache-Control": "no-store"},
        )
        assert r.headers["x-gateway-cache"] == "bypass"
        r = await rig.chat({**opted_out, "cache": False})
        assert r.headers["x-gateway-cache"] == "bypass"
        # `"cache": true` asks for it whatever the temperature; the provider never sees it.
        asked = chat_body("Tell me a story", cache=True)
        r = await rig.chat(asked)
        assert r.headers["x-gateway-cache"] == "miss"
        assert all("cache" not in sent for sent in upstream_chats(rig))
        await wait_until(lambda: stores(rig) == 1)
        assert (await rig.chat(asked)).headers["x-gateway-cache"] == "hit"
        assert len(upstream_chats(rig)) == 5


async def test_an_organization_never_gets_another_s_entry(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=CACHE) as rig:
        body = chat_body("What is 2 + 2?", temperature=0)
        assert (await rig.chat(body)).headers["x-gateway-cache"] == "miss"
        await wait_until(lambda: stores(rig) == 1)
        assert (await rig.chat(body)).headers["x-gateway-cache"] == "hit"
        other = await other_org_key(rig)
        r = await rig.chat(body, key=other)
        assert r.status_code == 200 and r.headers["x-gateway-cache"] == "miss"
        assert len(upstream_chats(rig)) == 2


async def test_embeddings_are_cached_and_a_hit_is_billed_at_its_price(
    database_url: str, tmp_path: Path
) -> None:
    toml = (
        CACHE.replace("enabled = true", "enabled = false")
        + """
[[models]]
id = "embed-cached"
provider = "sim"
upstream = "sim-embed"
input_usd_per_mtok = 1
cache = true
cache_hit_usd_per_mtok = 100
"""
    )
    async with inference_rig(database_url, tmp_path, extra_toml=toml) as rig:
        body = {"model": "embed-cached", "input": ["one two three"]}
        auth = rig.gateway.auth(rig.key)
        first = await rig.gateway.client.post("/v1/embeddings", json=body, headers=auth)
        assert first.headers["x-gateway-cache"] == "miss"
        await wait_until(lambda: stores(rig) == 1)
        second = await rig.gateway.client.post("/v1/embeddings", json=body, headers=auth)
        assert second.headers["x-gateway-cache"] == "hit" and second.content == first.content
        tokens = first.json()["usage"]["prompt_tokens"]
        _, rows = await ledger(rig, settled=2)
        [hit] = [r for r in rows if "(cache hit)" in r.description]
        # $100 per million tokens, with the plan's fee.
        expected = charge_micros(Decimal(tokens * 100) / 1_000_000, fee_percent("free"))
        assert hit.amount_micros == -expected
        # Not every model caches: `small` does not (enabled = false).
        r = await rig.chat(chat_body("hi", temperature=0))
        assert "x-gateway-cache" not in r.headers


SEMANTIC = """
[cache]
enabled = true
mode = "semantic"
embeddings_model = "embed"
semantic_threshold = 0.8  # the simulated upstream's stand-in embeddings (docs/cache.md)
"""


async def test_semantic_mode_hits_a_paraphrase_and_misses_another_question(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=SEMANTIC) as rig:
        system = {"role": "system", "content": "You are the help desk."}

        def ask(text: str, system_prompt: dict[str, str] = system) -> dict[str, object]:
            return chat_body(text, temperature=0) | {
                "messages": [system_prompt, {"role": "user", "content": text}]
            }

        first = await rig.chat(ask("How do I reset my password?"))
        assert first.headers["x-gateway-cache"] == "miss"
        await wait_until(lambda: stores(rig) == 1)
        paraphrase = await rig.chat(ask("how can I reset my password"))
        assert paraphrase.headers["x-gateway-cache"] == "hit"
        assert paraphrase.content == first.content
        for other in (
            ask("How do I reset my username?"),  # another question, much the same words
            ask("How do I reset my password?", {"role": "system", "content": "Be a pirate."}),
        ):
            r = await rig.chat(other)
            assert r.headers["x-gateway-cache"] == "miss", other
        assert _plugins(rig).cache.stats.semantic_hits == 1
        assert len(upstream_chats(rig)) == 3


async def test_a_stream_is_replayed_only_to_a_client_asking_the_same_usage(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=CACHE) as rig:
        body = chat_body("What is 2 + 2?", temperature=0, stream=True)
        with_usage = {**body, "stream_options": {"include_usage": True}}
        first = await rig.chat(with_usage)
        assert first.headers["x-gateway-cache"] == "miss" and '"usage":{' in first.text
        await wait_until(lambda: stores(rig) == 1)
        plain = await rig.chat(body)  # did not ask for the usage chunk: not that stream
        assert plain.headers["x-gateway-cache"] == "miss" and '"usage":{' not in plain.text
        again = await rig.chat(with_usage)
        assert again.headers["x-gateway-cache"] == "hit" and again.content == first.content


async def test_a_key_may_opt_out_of_the_cache(database_url: str, tmp_path: Path) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=CACHE) as rig:
        gw = rig.gateway
        r = await gw.client.post(
            "/v1/keys", json={"name": "private", "cache": False}, headers=gw.auth()
        )
        assert r.status_code == 200 and r.json()["cache"] is False, r.text
        private, private_id = r.json()["key"], r.json()["id"]
        body = chat_body("What is 2 + 2?", temperature=0)
        for _ in range(2):
            assert (await rig.chat(body, key=private)).headers["x-gateway-cache"] == "bypass"
        assert stores(rig) == 0
        # Opting back in (PATCH) lets it use the cache like any other key.
        r = await gw.client.patch(f"/v1/keys/{private_id}", json={"cache": True}, headers=gw.auth())
        assert r.status_code == 200 and r.json()["cache"] is True
        assert (await rig.chat(body, key=private)).headers["x-gateway-cache"] == "miss"
        listed = await gw.client.get("/v1/keys", headers=gw.auth())
        assert {k["name"]: k["cache"] for k in listed.json()["data"]} == {
            "all": True,
            "private": True,
        }
