"""POST/GET/DELETE /v1/responses over real HTTP against the simulated upstream, on every
storage backend, for an OpenAI-compatible provider (`small`) and an Anthropic one (`haiku`):
create, retrieve, chains, input items, `store: false`, delete, another organization, the
function-call round trip."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bench.upstream.completion import TOOL_ARGUMENTS, TOOL_NAME
from tests.gateway.responses_rig import (
    create,
    delete,
    error_of,
    get,
    other_org_key,
    texts,
    upstream_bodies,
)
from tests.inference import Rig, inference_rig

WEATHER = {
    "type": "function",
    "name": TOOL_NAME,
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


def words(n: int) -> str:
    """What the simulated upstream says in `n` tokens."""
    return "".join(f"tok{i} " for i in range(n))


def output_text(response: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


@pytest.mark.parametrize("model", ["small", "haiku"])
async def test_create_then_retrieve_the_same_response(rig: Rig, model: str) -> None:
    rig.upstream.behavior.completion_tokens = 5
    r = await create(
        rig,
        {"model": model, "input": "hello", "metadata": {"k": "v"}, "max_output_tokens": 5},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"].startswith("resp_") and body["object"] == "response"
    assert body["status"] == "completed" and body["metadata"] == {"k": "v"}
    assert isinstance(body["created_at"], int)
    assert body["completed_at"] >= body["created_at"]
    message = body["output"][0]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"][0]["type"] == "output_text"
    assert message["content"][0]["annotations"] == []
    assert output_text(body) == words(5)
    usage = body["usage"]
    assert usage["output_tokens"] == 5 and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    got = await get(rig, f"/v1/responses/{body['id']}")
    assert got.status_code == 200 and got.json() == body
    # Cut short by max_output_tokens: incomplete, as OpenAI says it.
    short = (await create(rig, {"model": model, "input": "x", "max_output_tokens": 2})).json()
    assert short["status"] == "incomplete"
    assert short["incomplete_details"] == {"reason": "max_output_tokens"}
    assert (await get(rig, "/v1/responses/resp_unknown")).status_code == 404
    assert error_of(await get(rig, "/v1/responses/resp_unknown"))["code"] == "response_not_found"


@pytest.mark.parametrize("model", ["small", "haiku"])
async def test_a_chain_of_three_sends_the_whole_chain_in_order(rig: Rig, model: str) -> None:
    first = (
        await create(
            rig,
            {"model": model, "input": "one", "instructions": "first rules", "max_output_tokens": 2},
        )
    ).json()
    second = (
        await create(
            rig,
            {
                "model": model,
                "input": [{"role": "user", "content": "two"}],
                "previous_response_id": first["id"],
                "max_output_tokens": 3,
            },
        )
    ).json()
    r = await create(
        rig,
        {
            "model": model,
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "three"}],
                }
            ],
            "instructions": "third rules",
            "previous_response_id": second["id"],
        },
    )
    assert r.status_code == 200, r.text
    third = r.json()
    assert third["previous_response_id"] == second["id"]
    # `instructions` are not carried over: only this request's are sent.
    assert texts(rig, model) == [
        ("system", "third rules"),
        ("user", "one"),
        ("assistant", words(2)),
        ("user", "two"),
        ("assistant", words(3)),
        ("user", "three"),
    ]
    assert len(upstream_bodies(rig, model)) == 3
    items = (await get(rig, f"/v1/responses/{third['id']}/input_items?order=asc")).json()
    assert [(i["type"], i.get("role")) for i in items["data"]] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert items["data"][1]["id"] == first["output"][0]["id"]


async def test_input_items_paging(rig: Rig) -> None:
    r = await create(
        rig, {"model": "small", "input": [{"role": "user", "content": f"m{i}"} for i in range(5)]}
    )
    rid = r.json()["id"]
    base = f"/v1/responses/{rid}/input_items"
    everything = (await get(rig, base)).json()
    assert everything["object"] == "list" and everything["has_more"] is False
    texts_desc = [i["content"][0]["text"] for i in everything["data"]]
    assert texts_desc == ["m4", "m3", "m2", "m1", "m0"]  # newest first by default
    ids = [i["id"] for i in everything["data"]]
    assert everything["first_id"] == ids[0] and everything["last_id"] == ids[-1]
    page = (await get(rig, f"{base}?limit=2")).json()
    assert [i["id"] for i in page["data"]] == ids[:2] and page["has_more"] is True
    page = (await get(rig, f"{base}?limit=2&after={page['last_id']}")).json()
    assert [i["id"] for i in page["data"]] == ids[2:4] and page["has_more"] is True
    page = (await get(rig, f"{base}?limit=2&after={page['last_id']}")).json()
    assert [i["id"] for i in page["data"]] == ids[4:] and page["has_more"] is False
    asc = (await get(rig, f"{base}?order=asc&limit=3")).json()
    assert [i["id"] for i in asc["data"]] == ids[::-1][:3]
    before = (await get(rig, f"{base}?limit=2&before={ids[3]}")).json()
    assert [i["id"] for i in before["data"]] == ids[1:3] and before["has_more"] is True
    between = (await get(rig, f"{base}?after={ids[0]}&before={ids[3]}")).json()
    assert [i["id"] for i in between["data"]] == ids[1:3]
    for query, param in (
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=x", "limit"),
        ("order=up", "order"),
        ("after=msg_nope", "after"),
        ("before=msg_nope", "before"),
    ):
        bad = await get(rig, f"{base}?{query}")
        assert bad.status_code == 400 and error_of(bad)["param"] == param, query
    assert (await get(rig, "/v1/responses/resp_nope/input_items")).status_code == 404


async def test_store_false_is_answered_but_neither_retrievable_nor_continuable(rig: Rig) -> None:
    r = await create(rig, {"model": "small", "input": "x", "store": False})
    assert r.status_code == 200 and r.json()["store"] is False
    rid = r.json()["id"]
    assert (await get(rig, f"/v1/responses/{rid}")).status_code == 404
    assert (await get(rig, f"/v1/responses/{rid}/input_items")).status_code == 404
    follow = await create(rig, {"model": "small", "input": "y", "previous_response_id": rid})
    assert follow.status_code == 400
    error = error_of(follow)
    assert (error["code"], error["param"]) == (
        "previous_response_not_found",
        "previous_response_id",
    )
    assert await rig.gateway.runtime.storage.responses.count() == 0


async def test_the_conversation_is_encrypted_at_rest(rig: Rig) -> None:
    secret = "my-unmistakable-secret-phrase"
    r = await create(rig, {"model": "small", "input": secret, "instructions": secret})
    rows = await rig.gateway.runtime.storage.db.fetch("SELECT * FROM responses", {})
    assert len(rows) == 1 and rows[0]["id"] == r.json()["id"]
    dumped = str(rows[0])
    assert secret not in dumped and "tok0" not in dumped
    assert rows[0]["data_key_sealed"].startswith("v1:")


async def test_delete_clears_it(rig: Rig) -> None:
    rid = (await create(rig, {"model": "small", "input": "x"})).json()["id"]
    r = await delete(rig, rid)
    assert r.status_code == 200
    assert r.json() == {"id": rid, "object": "response", "deleted": True}
    assert (await get(rig, f"/v1/responses/{rid}")).status_code == 404
    follow = await create(rig, {"model": "small", "input": "y", "previous_response_id": rid})
    assert error_of(follow)["code"] == "previous_response_not_found"
    assert (await delete(rig, rid)).status_code == 404
    assert await rig.gateway.runtime.storage.responses.count() == 0


async def test_another_organization_sees_nothing(rig: Rig) -> None:
    rid = (await create(rig, {"model": "small", "input": "secret"})).json()["id"]
    other = await other_org_key(rig)
    assert (await get(rig, f"/v1/responses/{rid}", key=other)).status_code == 404
    assert (await get(rig, f"/v1/responses/{rid}/input_items", key=other)).status_code == 404
    assert (await delete(rig, rid, key=other)).status_code == 404
    sent = len(rig.upstream.requests)
    follow = await create(
        rig, {"model": "small", "input": "y", "previous_response_id": rid}, key=other
    )
    assert error_of(follow)["code"] == "previous_response_not_found"
    assert len(rig.upstream.requests) == sent
    assert (await get(rig, f"/v1/responses/{rid}")).status_code == 200


@pytest.mark.parametrize("model", ["small", "haiku"])
async def test_function_call_round_trip(rig: Rig, model: str) -> None:
    rig.upstream.behavior.tool_call = True
    r = await create(rig, {"model": model, "input": "weather in Paris?", "tools": [WEATHER]})
    assert r.status_code == 200, r.text
    first = r.json()
    call = first["output"][-1]
    assert call["type"] == "function_call" and call["name"] == TOOL_NAME
    assert call["id"].startswith("fc_") and call["call_id"]
    assert call["arguments"].replace(" ", "") == TOOL_ARGUMENTS.replace(" ", "")
    assert first["tools"][0]["name"] == TOOL_NAME
    rig.upstream.behavior.tool_call = False
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    r = await create(
        rig,
        {
            "model": model,
            "input": [result],
            "previous_response_id": first["id"],
            "tools": [WEATHER],
        },
    )
    assert r.status_code == 200, r.text
    assert output_text(r.json()).startswith("tok0")
    body = upstream_bodies(rig, model)[-1]
    if model == "small":
        assert body["messages"] == [
            {"role": "user", "content": "weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call["call_id"],
                        "type": "function",
                        "function": {"name": TOOL_NAME, "arguments": call["arguments"]},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call["call_id"], "content": "sunny"},
        ]
    else:
        messages = body["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        tool_use = messages[1]["content"][-1]
        assert tool_use["type"] == "tool_use" and tool_use["id"] == call["call_id"]
        assert tool_use["name"] == TOOL_NAME
        assert messages[2]["content"] == [
            {"type": "tool_result", "tool_use_id": call["call_id"], "content": "sunny"}
        ]
    items = (await get(rig, f"/v1/responses/{r.json()['id']}/input_items?order=asc")).json()
    assert [i["type"] for i in items["data"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]


async def test_an_output_for_an_unknown_call_is_a_400(rig: Rig) -> None:
    rid = (await create(rig, {"model": "small", "input": "x"})).json()["id"]
    result = {"type": "function_call_output", "call_id": "call_nope", "output": "o"}
    r = await create(rig, {"model": "small", "input": [result], "previous_response_id": rid})
    assert r.status_code == 400
    assert (error_of(r)["code"], error_of(r)["param"]) == ("unknown_call_id", "input[0].call_id")
    assert len(rig.upstream.requests) == 1
