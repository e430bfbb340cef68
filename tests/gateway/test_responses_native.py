"""A provider that speaks Responses itself (`supports` lists `responses`): built-in tools are
forwarded (web_search answers with a `web_search_call` item and cited text), the gateway keeps
the conversation (the provider is asked with `store: false` and the whole context as input),
JSON and streams, through the openai SDK too. Other providers still refuse built-in tools."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from bench.upstream import UpstreamServer, serve_upstream
from bench.upstream.completion import TOOL_NAME
from bench.upstream.responses_routes import CITED_URL
from tests.gateway.responses_rig import create, error_of, get, in_thread, sdk
from tests.inference import Rig, inference_rig, ledger

NATIVE_TOML = """
[[providers]]
name = "native"
kind = "openai"
base_url = "{url}/v1"
api_key = "sk-native"
supports = ["chat", "responses"]

[[models]]
id = "nat"
provider = "native"
upstream = "gpt-native"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5
"""
SEARCH = {"type": "web_search_preview"}


@dataclass
class Native:
    rig: Rig
    upstream: UpstreamServer  # the native provider's own simulated upstream

    def bodies(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.upstream.requests if r.path == "/v1/responses"]


@pytest.fixture
async def native(database_url: str, tmp_path: Path) -> AsyncIterator[Native]:
    async with trio.open_nursery() as nursery:
        upstream: UpstreamServer = await nursery.start(serve_upstream)
        toml = NATIVE_TOML.format(url=upstream.url)
        async with inference_rig(database_url, tmp_path, extra_toml=toml) as rig:
            yield Native(rig, upstream)
        nursery.cancel_scope.cancel()


def events(body: str) -> list[dict[str, Any]]:
    datas = [ln[6:] for ln in body.split("\n") if ln.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    return [msgspec.json.decode(d) for d in datas[:-1]]


async def test_web_search_is_forwarded_and_the_chain_kept_by_the_gateway(native: Native) -> None:
    rig = native.rig
    r = await create(
        rig,
        {"model": "nat", "input": "weather in Paris?", "tools": [SEARCH], "metadata": {"k": "v"}},
    )
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["id"].startswith("resp_") and first["model"] == "native/gpt-native"
    assert first["metadata"] == {"k": "v"} and first["store"] is True
    assert [i["type"] for i in first["output"]] == ["web_search_call", "message"]
    annotation = first["output"][1]["content"][0]["annotations"][0]
    assert annotation["type"] == "url_citation" and annotation["url"] == CITED_URL
    sent = native.bodies()[-1]
    assert sent["model"] == "gpt-native" and sent["store"] is False
    assert sent["tools"] == [SEARCH] and "previous_response_id" not in sent
    assert (await get(rig, f"/v1/responses/{first['id']}")).json() == first
    r = await create(
        rig,
        {
            "model": "nat",
            "input": "and tomorrow?",
            "previous_response_id": first["id"],
            "instructions": "brief",
        },
    )
    assert r.status_code == 200, r.text
    sent = native.bodies()[-1]
    assert sent["instructions"] == "brief"
    assert [(i["type"], i.get("role")) for i in sent["input"]] == [
        ("message", "user"),
        ("message", "assistant"),  # the web_search_call item is the provider's, not replayed
        ("message", "user"),
    ]
    assert all("id" not in item for item in sent["input"])
    usage = r.json()["usage"]
    balance, rows = await ledger(rig, settled=2)
    assert len(rows) == 2 and {row.model for row in rows} == {"native/gpt-native"}
    assert usage["input_tokens"] > 0
    # The same chain continues on a translated provider: the search item is not replayed.
    r = await create(
        rig, {"model": "small", "input": "thanks", "previous_response_id": r.json()["id"]}
    )
    assert r.status_code == 200, r.text


async def test_built_in_tools_are_still_refused_for_translated_providers(native: Native) -> None:
    for model in ("small", "haiku"):
        r = await create(native.rig, {"model": model, "input": "x", "tools": [SEARCH]})
        assert r.status_code == 400
        assert (error_of(r)["code"], error_of(r)["param"]) == ("unsupported_tool", "tools[0].type")


async def test_a_native_stream_passes_through_and_is_stored(native: Native) -> None:
    rig = native.rig
    r = await create(rig, {"model": "nat", "input": "hi", "tools": [SEARCH], "stream": True})
    assert r.status_code == 200, r.text
    evs = events(r.text)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    assert evs[0]["type"] == "response.created" and evs[-1]["type"] == "response.completed"
    final = evs[-1]["response"]
    assert evs[0]["response"]["id"] == final["id"] and final["id"].startswith("resp_")
    assert final["model"] == "native/gpt-native"
    assert [i["type"] for i in final["output"]] == ["web_search_call", "message"]
    assert (await get(rig, f"/v1/responses/{final['id']}")).json() == final
    assert native.bodies()[-1]["stream"] is True
    _, rows = await ledger(rig, settled=1)
    assert len(rows) == 1


async def test_the_sdk_against_a_native_provider(native: Native) -> None:
    client = sdk(native.rig)

    def run() -> None:
        first = client.responses.create(model="nat", input="hi", tools=[SEARCH])  # type: ignore[list-item]
        assert first.output[0].type == "web_search_call"
        with client.responses.stream(
            model="nat", input="again", previous_response_id=first.id
        ) as s:
            final = s.get_final_response()
        assert final.output_text and final.previous_response_id == first.id
        assert client.responses.retrieve(final.id).output_text == final.output_text

    try:
        await in_thread(run)
    finally:
        client.close()


async def test_a_native_function_call_round_trip(native: Native) -> None:
    native.upstream.behavior.tool_call = True
    tool = {"type": "function", "name": TOOL_NAME, "parameters": {"type": "object"}}
    r = await create(native.rig, {"model": "nat", "input": "weather?", "tools": [tool]})
    call = r.json()["output"][-1]
    assert call["type"] == "function_call"
    native.upstream.behavior.tool_call = False
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    r = await create(
        native.rig,
        {
            "model": "nat",
            "input": [result],
            "tools": [tool],
            "previous_response_id": r.json()["id"],
        },
    )
    assert r.status_code == 200, r.text
    sent = native.bodies()[-1]["input"]
    assert [i["type"] for i in sent] == ["message", "function_call", "function_call_output"]
    assert sent[1]["call_id"] == sent[2]["call_id"] == call["call_id"]
