"""POST /v1/chat/completions against the simulated upstream, JSON and SSE, OpenAI-compatible
and Anthropic providers, on every storage backend."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from protocol.billing import charge_micros
from tests.inference import (
    PRICE_IN,
    PRICE_OUT,
    UPSTREAM_KEY,
    Rig,
    chunks,
    inference_rig,
    sse_frames,
)

MESSAGES = [{"role": "user", "content": "hello there"}]


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


async def test_json_completion_is_relayed_with_the_resolved_model(rig: Rig) -> None:
    r = await rig.chat({"model": "small", "messages": MESSAGES, "max_tokens": 5, "user": "u1"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "sim/sim-small"
    assert body["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4 "
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 5
    sent = rig.upstream.requests[-1]
    assert sent.path == "/v1/chat/completions"
    forwarded = sent.json()
    assert forwarded["model"] == "sim-small"
    assert forwarded["user"] == "u1" and forwarded["messages"] == MESSAGES  # passed through
    # The upstream sees the provider's key, never the client's.
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert rig.key not in json.dumps(sent.headers) and rig.key.encode() not in sent.body


async def test_canonical_name_works_as_well_as_the_alias(rig: Rig) -> None:
    r = await rig.chat({"model": "sim/sim-small", "messages": MESSAGES, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["model"] == "sim/sim-small"


async def test_stream_follows_every_spec_rule(rig: Rig) -> None:
    r = await rig.chat({"model": "small", "messages": MESSAGES, "stream": True, "max_tokens": 6})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["connection"] == "keep-alive"
    frames = sse_frames(r.text)
    assert frames[-1] == "[DONE]"
    parsed = chunks(r.text)
    assert len({c["id"] for c in parsed}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in parsed)
    assert all(c["model"] == "sim/sim-small" and isinstance(c["created"], int) for c in parsed)
    deltas = [c["choices"][0]["delta"] for c in parsed]
    assert "role" in deltas[0] and all("role" not in d for d in deltas[1:])
    finish = [c["choices"][0]["finish_reason"] for c in parsed]
    assert finish[:-1] == [None] * (len(finish) - 1) and finish[-1] == "length"
    assert "".join(d.get("content") or "" for d in deltas) == "tok0 tok1 tok2 tok3 tok4 tok5 "
    # No usage chunk for the client — but the gateway asked the upstream for one.
    assert all(c["choices"] for c in parsed)
    assert rig.upstream.requests[-1].json()["stream_options"] == {"include_usage": True}


async def test_stream_usage_chunk_only_when_asked(rig: Rig) -> None:
    r = await rig.chat(
        {
            "model": "small",
            "messages": MESSAGES,
            "stream": True,
            "max_tokens": 3,
            "stream_options": {"include_usage": True},
        }
    )
    parsed = chunks(r.text)
    assert parsed[-1]["choices"] == []
    usage = parsed[-1]["usage"]
    assert usage["completion_tokens"] == 3
    assert usage["total_tokens"] == usage["prompt_tokens"] + 3
    assert sse_frames(r.text)[-1] == "[DONE]"
    assert sum(1 for c in parsed if not c["choices"]) == 1


async def test_stream_relays_tool_calls_and_reasoning(rig: Rig) -> None:
    rig.upstream.behavior.tool_call = True
    r = await rig.chat({"model": "small", "messages": MESSAGES, "stream": True})
    parsed = chunks(r.text)
    calls = [tc for c in parsed for tc in c["choices"][0]["delta"].get("tool_calls") or []]
    assert calls[0]["id"] and calls[0]["function"]["name"] == "get_weather"
    arguments = "".join(tc["function"].get("arguments", "") for tc in calls if tc["index"] == 0)
    assert json.loads(arguments) == {"city": "Paris"}
    assert parsed[-1]["choices"][0]["finish_reason"] == "tool_calls"

    rig.upstream.behavior.tool_call = False
    rig.upstream.behavior.reasoning = True
    r = await rig.chat({"model": "small", "messages": MESSAGES, "stream": True, "max_tokens": 3})
    deltas = [c["choices"][0]["delta"] for c in chunks(r.text)]
    assert any(d.get("reasoning") for d in deltas)


async def test_anthropic_json_is_translated(rig: Rig) -> None:
    r = await rig.chat(
        {
            "model": "haiku",
            "messages": [{"role": "system", "content": "be brief"}, *MESSAGES],
            "max_tokens": 4,
        }
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "claude/claude-haiku"
    assert body["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 "
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 4
    sent = rig.upstream.requests[-1]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == UPSTREAM_KEY and "anthropic-version" in sent.headers
    assert sent.json()["system"] == "be brief" and sent.json()["model"] == "claude-haiku"


async def test_anthropic_stream_is_translated_into_chunks(rig: Rig) -> None:
    r = await rig.chat(
        {
            "model": "haiku",
            "messages": MESSAGES,
            "stream": True,
            "max_tokens": 5,
            "stream_options": {"include_usage": True},
        }
    )
    assert r.status_code == 200
    parsed = chunks(r.text)
    assert len({c["id"] for c in parsed}) == 1
    deltas = [c["choices"][0]["delta"] for c in parsed if c["choices"]]
    assert deltas[0].get("role") == "assistant"
    assert "".join(d.get("content") or "" for d in deltas) == "tok0 tok1 tok2 tok3 tok4 "
    assert parsed[-2]["choices"][0]["finish_reason"] == "length"
    assert parsed[-1]["usage"]["completion_tokens"] == 5
    assert sse_frames(r.text)[-1] == "[DONE]"


async def test_access_log_records_usage_and_cost(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.waiting import wait_until

    caplog.set_level("INFO", logger="gateway.access")
    r = await rig.chat({"model": "small", "messages": MESSAGES, "max_tokens": 4})
    usage = r.json()["usage"]

    def line() -> dict[str, object] | None:
        for rec in caplog.records:
            if rec.name != "gateway.access":
                continue  # e.g. billing's warning about the test payment provider
            entry = json.loads(rec.getMessage())
            if entry["route"] == "/v1/chat/completions":
                return entry  # type: ignore[no-any-return]
        return None

    await wait_until(lambda: line() is not None)
    entry = line()
    assert entry is not None
    assert entry["model"] == "sim/sim-small" and entry["status"] == 200
    assert entry["prompt_tokens"] == usage["prompt_tokens"]
    assert entry["completion_tokens"] == 4
    # What the org pays: provider cost plus the free plan's 4 % fee, in whole micro-dollars.
    cost = (usage["prompt_tokens"] * PRICE_IN + 4 * PRICE_OUT) / 1_000_000
    assert entry["cost_usd"] == charge_micros(cost, Decimal(4)) / 1_000_000
