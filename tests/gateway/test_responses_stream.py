"""`stream: true` over real HTTP for an OpenAI-compatible provider and the Anthropic
translation: the full Responses event sequence in `sequence_number` order, tool calls, the
completed response stored before the stream's last frames (so it is retrievable and
continuable at once), `store: false`, billing, a client that leaves (charged for what was
relayed, nothing stored)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from bench.upstream.completion import TOOL_ARGUMENTS, TOOL_NAME
from protocol.billing import charge_micros
from tests.gateway.responses_rig import create, get, texts
from tests.inference import PRICE_IN, PRICE_OUT, Rig, inference_rig, ledger

CREDIT = 100_000_000
TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


def events(body: str) -> list[dict[str, Any]]:
    """Each SSE block's `data:` JSON, in order; the stream must end with `data: [DONE]`."""
    datas = []
    for block in body.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                datas.append(line[len("data: ") :])
    assert datas[-1] == "[DONE]"
    decoded = [msgspec.json.decode(d) for d in datas[:-1]]
    for block in body.split("\n\n"):  # the `event:` line names the same type
        lines = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
        if "event" in lines:
            assert msgspec.json.decode(lines["data"])["type"] == lines["event"]
    return decoded


def dedupe(types: list[str]) -> list[str]:
    return [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]


@pytest.mark.parametrize("model", ["small", "haiku"])
async def test_a_text_stream_has_every_event_in_order_and_is_stored(rig: Rig, model: str) -> None:
    rig.upstream.behavior.completion_tokens = 4
    r = await create(
        rig,
        {
            "model": model,
            "input": "hello",
            "stream": True,
            "max_output_tokens": 4,
            "metadata": {"k": "v"},
        },
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/event-stream"
    evs = events(r.text)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    assert dedupe([e["type"] for e in evs]) == TEXT_EVENTS
    deltas = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
    assert deltas == "tok0 tok1 tok2 tok3 "
    created, completed = evs[0]["response"], evs[-1]["response"]
    assert created["status"] == "in_progress" and created["id"] == completed["id"]
    assert completed["status"] == "completed" and completed["metadata"] == {"k": "v"}
    assert completed["output"][0]["content"][0]["text"] == deltas
    assert completed["usage"]["output_tokens"] == 4
    # Stored before the last frames left: readable and continuable at once.
    got = await get(rig, f"/v1/responses/{completed['id']}")
    assert got.status_code == 200 and got.json() == completed
    follow = await create(
        rig, {"model": model, "input": "more", "previous_response_id": completed["id"]}
    )
    assert follow.status_code == 200
    assert texts(rig, model)[-3:] == [("user", "hello"), ("assistant", deltas), ("user", "more")]
    usage = completed["usage"]
    cost = (usage["input_tokens"] * PRICE_IN + usage["output_tokens"] * PRICE_OUT) / 10**6
    balance, rows = await ledger(rig, settled=2)
    assert charge_micros(cost, Decimal(4)) in [-row.amount_micros for row in rows]
    assert balance == CREDIT + sum(row.amount_micros for row in rows)


@pytest.mark.parametrize("model", ["small", "haiku"])
async def test_a_tool_call_stream(rig: Rig, model: str) -> None:
    rig.upstream.behavior.tool_call = True
    tool = {"type": "function", "name": TOOL_NAME, "parameters": {"type": "object"}}
    r = await create(rig, {"model": model, "input": "weather?", "stream": True, "tools": [tool]})
    assert r.status_code == 200, r.text
    evs = events(r.text)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    types = dedupe([e["type"] for e in evs])
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-5:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = next(e for e in evs if e["type"] == "response.output_item.added")["item"]
    assert added["type"] == "function_call" and added["name"] == TOOL_NAME
    arguments = "".join(
        e["delta"] for e in evs if e["type"] == "response.function_call_arguments.delta"
    )
    done = next(e for e in evs if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == arguments
    assert msgspec.json.decode(arguments) == msgspec.json.decode(TOOL_ARGUMENTS)
    final = evs[-1]["response"]
    call = final["output"][-1]
    assert call["type"] == "function_call" and call["arguments"] == arguments
    rig.upstream.behavior.tool_call = False
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    follow = await create(
        rig,
        {
            "model": model,
            "input": [result],
            "previous_response_id": final["id"],
            "tools": [tool],
            "stream": True,
        },
    )
    assert follow.status_code == 200
    assert events(follow.text)[-1]["response"]["status"] == "completed"


async def test_store_false_streams_are_not_kept(rig: Rig) -> None:
    r = await create(rig, {"model": "small", "input": "x", "stream": True, "store": False})
    final = events(r.text)[-1]["response"]
    assert final["store"] is False
    assert (await get(rig, f"/v1/responses/{final['id']}")).status_code == 404
    assert await rig.gateway.runtime.storage.responses.count() == 0


async def test_a_client_that_leaves_is_charged_for_what_was_relayed_and_nothing_is_stored(
    rig: Rig,
) -> None:
    rig.upstream.behavior.chunk_interval_s = 0.05
    rig.upstream.behavior.completion_tokens = 200
    host, port = rig.gateway.url.removeprefix("http://").split(":")
    payload = msgspec.json.encode({"model": "small", "input": "x", "stream": True})
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(
        b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {rig.key}\r\ncontent-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    received = b""
    with trio.fail_after(10):
        while received.count(b"response.output_text.delta") < 6:
            received += await stream.receive_some()
    assert received.startswith(b"HTTP/1.1 200")
    await stream.aclose()
    balance, rows = await ledger(rig, settled=1)
    assert len(rows) == 1 and balance < CREDIT
    assert await rig.gateway.runtime.storage.responses.count() == 0


async def test_an_upstream_error_before_the_stream_is_a_json_error(rig: Rig) -> None:
    rig.upstream.behavior.fail_status = 503
    r = await create(rig, {"model": "haiku", "input": "x", "stream": True})
    assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_error"
    balance, rows = await ledger(rig)
    assert (balance, rows) == (CREDIT, [])


@pytest.mark.parametrize("model", ["small", "haiku"])
async def test_a_stream_broken_upstream_ends_failed_and_is_not_stored(rig: Rig, model: str) -> None:
    rig.upstream.behavior.break_after_chunks = 2
    r = await create(rig, {"model": model, "input": "x", "stream": True})
    assert r.status_code == 200
    evs = events(r.text)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    final = evs[-1]
    assert final["type"] == "response.failed" and final["response"]["status"] == "failed"
    assert (await get(rig, f"/v1/responses/{final['response']['id']}")).status_code == 404
    assert await rig.gateway.runtime.storage.responses.count() == 0
