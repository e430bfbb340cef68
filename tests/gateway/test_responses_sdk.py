"""The official openai SDK, unchanged, against the gateway's Responses API (OpenAI-compatible
and Anthropic providers): create, retrieve, input_items.list, delete and the
`responses.stream()` helper that assembles the final response from the events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from bench.upstream.completion import TOOL_NAME
from tests.gateway.responses_rig import in_thread, sdk
from tests.inference import Rig, inference_rig


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


@pytest.mark.parametrize("model", ["small", "haiku"])
async def test_create_retrieve_input_items_delete(rig: Rig, model: str) -> None:
    rig.upstream.behavior.completion_tokens = 3
    client = sdk(rig)

    def run() -> None:
        first = client.responses.create(
            model=model, input="hello", instructions="be brief", max_output_tokens=3
        )
        assert first.status == "completed" and first.output_text == "tok0 tok1 tok2 "
        assert first.usage is not None and first.usage.output_tokens == 3
        second = client.responses.create(
            model=model, input="again", previous_response_id=first.id, metadata={"a": "b"}
        )
        got = client.responses.retrieve(second.id)
        assert got.id == second.id and got.output_text == second.output_text
        assert got.metadata == {"a": "b"} and got.previous_response_id == first.id
        items = client.responses.input_items.list(second.id, order="asc")
        assert [i.type for i in items.data] == ["message", "message", "message"]
        first_item: Any = items.data[0]
        assert first_item.content[0].text == "hello"
        paged = [i.id for i in client.responses.input_items.list(second.id, limit=1)]
        assert paged == [i.id for i in items.data][::-1]  # auto-paging, newest first
        client.responses.delete(second.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(second.id)
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model=model, input="x", previous_response_id=second.id)
        assert caught.value.code == "previous_response_not_found"

    try:
        await in_thread(run)
    finally:
        client.close()  # its pooled connections, not left to the garbage collector


@pytest.mark.parametrize("model", ["small", "haiku"])
async def test_the_stream_helper_assembles_the_final_response(rig: Rig, model: str) -> None:
    rig.upstream.behavior.completion_tokens = 5
    client = sdk(rig)

    def run() -> None:
        with client.responses.stream(model=model, input="hi", max_output_tokens=5) as s:
            seen = [event.type for event in s]
            final = s.get_final_response()
        assert seen[0] == "response.created" and seen[-1] == "response.completed"
        assert final.output_text == "tok0 tok1 tok2 tok3 tok4 "
        assert client.responses.retrieve(final.id).output_text == final.output_text

    try:
        await in_thread(run)
    finally:
        client.close()  # its pooled connections, not left to the garbage collector


async def test_the_stream_helper_with_a_tool_call(rig: Rig) -> None:
    rig.upstream.behavior.tool_call = True
    client = sdk(rig)
    tool: Any = {
        "type": "function",
        "name": TOOL_NAME,
        "parameters": {"type": "object"},
        "strict": False,
    }

    def run() -> None:
        with client.responses.stream(model="haiku", input="weather?", tools=[tool]) as s:
            final = s.get_final_response()
        call = final.output[-1]
        assert call.type == "function_call" and call.name == TOOL_NAME

    try:
        await in_thread(run)
    finally:
        client.close()  # its pooled connections, not left to the garbage collector
