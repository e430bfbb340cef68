"""Guardrails on Responses over real HTTP: the input checked (instructions and input items),
the JSON answer's text, and a stream cut with `response.failed` before the value (LiteLLM's
streamed Responses answered 500 with a guardrail on); a cut response is not stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.gateway.plugins.rig import PII_BLOCK, PII_REDACT, events_of
from tests.gateway.responses_rig import create, get
from tests.inference import inference_rig, ledger

pytestmark = pytest.mark.storage

EMAIL = "jane.roe@example.com"
GUARD_ALL = PII_BLOCK.replace('models = ["small"]', 'models = ["*"]')


def sse_events(body: str) -> list[dict[str, Any]]:
    return [
        msgspec.json.decode(line[6:]) for line in body.split("\n") if line.startswith("data: {")
    ]


async def test_input_and_json_output_are_checked(database_url: str, tmp_path: Path) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=GUARD_ALL) as rig:
        r = await create(rig, {"model": "small", "input": f"mail {EMAIL}"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "guardrail_blocked"
        r = await create(rig, {"model": "small", "instructions": f"sign as {EMAIL}", "input": "hi"})
        assert r.status_code == 400
        rig.upstream.behavior.reply_text = f"reach me at {EMAIL}"
        r = await create(rig, {"model": "haiku", "input": "hello"})
        assert r.status_code == 400 and EMAIL not in r.text
        stages = [e.data["stage"] for e in await events_of(rig, "guardrail.triggered")]
        assert sorted(stages) == ["input", "input", "output"]
        _, rows = await ledger(rig)
        assert rows == []


async def test_a_stream_is_cut_with_response_failed_and_not_stored(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=GUARD_ALL) as rig:
        words = " ".join(f"w{i}" for i in range(40))
        rig.upstream.behavior.reply_text = f"{words} write {EMAIL} then more"
        rig.upstream.behavior.reply_chunk_chars = 6
        r = await create(rig, {"model": "small", "input": "who?", "stream": True})
        assert r.status_code == 200
        events = sse_events(r.text)
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert text.startswith("w0 w1") and "@" not in text and "jane" not in text
        assert EMAIL not in r.text
        last = events[-1]
        assert last["type"] == "response.failed"
        assert last["response"]["error"]["code"] == "guardrail_blocked"
        response_id = last["response"]["id"]
        assert (await get(rig, f"/v1/responses/{response_id}")).status_code == 404


async def test_a_streamed_answer_is_redacted_in_deltas_and_in_the_done_events(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, extra_toml=PII_REDACT) as rig:
        rig.upstream.behavior.reply_text = f"write {EMAIL} soon"
        rig.upstream.behavior.reply_chunk_chars = 5
        r = await create(rig, {"model": "small", "input": "who?", "stream": True})
        assert r.status_code == 200 and EMAIL not in r.text
        events = sse_events(r.text)
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert text == "write [EMAIL] soon"
        completed = events[-1]
        assert completed["type"] == "response.completed"
        output = completed["response"]["output"][0]["content"][0]["text"]
        assert output == "write [EMAIL] soon"
        stored = await get(rig, f"/v1/responses/{completed['response']['id']}")
        assert stored.status_code == 200 and EMAIL not in stored.text
        assert stored.json()["output"][0]["content"][0]["text"] == "write [EMAIL] soon"
