"""A provider that answers with well-framed HTTP but bodies that are not chat completions:
each is a 502 `upstream_bad_response`, nothing is stored or charged, and the gateway keeps
serving. A stream of garbage ends `response.failed`, not stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.harness import Gateway, gateway_config, running_gateway
from tests.raw_upstream import RawUpstream, chunked, completion, ok, serve_raw_upstream


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Gateway, RawUpstream, str]]:
    async with trio.open_nursery() as nursery:
        raw: RawUpstream = await nursery.start(serve_raw_upstream)
        toml = f"""
[[providers]]
name = "raw"
kind = "openai"
base_url = "{raw.url}/v1"
api_key = "sk-raw"
read_timeout_s = 2

[[providers]]
name = "rawc"
kind = "anthropic"
base_url = "{raw.url}/v1"
api_key = "sk-raw"
read_timeout_s = 2

[[models]]
id = "r"
provider = "raw"
upstream = "r"
input_usd_per_mtok = 1
output_usd_per_mtok = 1

[[models]]
id = "rc"
provider = "rawc"
upstream = "rc"
input_usd_per_mtok = 1
output_usd_per_mtok = 1
"""
        async with running_gateway(gateway_config(database_url, tmp_path, toml=toml)) as gw:
            key = (await gw.client.post("/v1/keys", json={"name": "k"}, headers=gw.auth())).json()
            await gw.client.post("/v1/credits/topup", json={"amount_usd": 10}, headers=gw.auth())
            yield gw, raw, key["key"]
        nursery.cancel_scope.cancel()


HOSTILE = {
    "not chat": b'{"ok": true}',
    "no choices": b'{"id": "c", "choices": []}',
    "array": b"[]",
    "content a number": completion(5),
    "choices a string": b'{"choices": "x"}',
    "deep": b'{"choices": [{"message": {"content": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}]}",
    "tool calls garbage": b'{"choices": [{"message": {"tool_calls": [{"function": 7}]}}]}',
}


async def post(gw: Gateway, key: str, model: str = "r", **body: object) -> httpx.Response:
    return await gw.client.post(
        "/v1/responses", json={"model": model, "input": "x", **body}, headers=gw.auth(key)
    )


@pytest.mark.parametrize("model", ["r", "rc"])
@pytest.mark.parametrize("case", HOSTILE)
async def test_a_hostile_answer_is_502_and_nothing_is_kept(
    rig: tuple[Gateway, RawUpstream, str], case: str, model: str
) -> None:
    gw, raw, key = rig
    raw.play([ok(HOSTILE[case])])
    with trio.fail_after(10):
        r = await post(gw, key, model)
    assert r.status_code == 502, r.text
    assert r.json()["error"]["type"] == "upstream_error"
    assert await gw.runtime.storage.responses.count() == 0
    await gw.runtime.accountant.flush()
    rows, _ = await gw.runtime.storage.ledger.list(gw.org_id, type="usage", limit=10, offset=0)
    assert rows == []
    raw.play([ok(completion("fine"))])
    good = await post(gw, key)
    assert good.status_code == 200 and good.json()["output"][0]["content"][0]["text"] == "fine"


async def test_a_garbage_stream_ends_failed_and_is_not_stored(
    rig: tuple[Gateway, RawUpstream, str],
) -> None:
    gw, raw, key = rig
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    raw.play([chunked(b'data: {"choices": "nope"}\n\n', b"data: [DONE]\n\n", head=head)])
    with trio.fail_after(10):
        r = await post(gw, key, stream=True)
    assert r.status_code == 200
    assert '"type":"response.failed"' in r.text and r.text.endswith("data: [DONE]\n\n")
    assert await gw.runtime.storage.responses.count() == 0
