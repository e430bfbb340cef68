"""Stream failover (docs/routing.md): a stream that breaks after its first byte goes on at
another deployment of the model — one uninterrupted stream for the client, one `id`, one
`[DONE]`, the text exactly what a healthy deployment gives — and both legs are billed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.upstream import Faults
from gateway.inference.billing import pricing_for
from protocol.pricing import estimate_tokens
from tests.gateway.routing.rig import Routed, routed_rig
from tests.inference import chunks, ledger

# vLLM deployments (continue_final_message: the simulated upstream goes on from the words
# already said), a rest too short to keep the broken one out, so every stream may try it.
MODEL = """
[[models]]
id = "ha"
strategy = "weighted"
input_usd_per_mtok = 1
output_usd_per_mtok = 2
cooldown_s = 0.001
max_cooldown_s = 0.001
max_attempts = 4
{extra}

[[models.deployments]]
provider = "east"
upstream = "sim-a"

[[models.deployments]]
provider = "west"
upstream = "sim-b"
"""
HEALTHY = "".join(f"tok{i} " for i in range(20))  # the simulated upstream's 20 words


def _text(body: str) -> tuple[str, set[str], int]:
    """The streamed content, the chunk ids, and how many `[DONE]` the body held."""
    parts = chunks(body)
    text = "".join(
        (c["choices"][0]["delta"].get("content") or "") for c in parts if c.get("choices")
    )
    return text, {c["id"] for c in parts}, body.count("data: [DONE]")


async def _stream(routed: Routed, **extra: Any) -> Any:
    return await routed.chat(stream=True, **extra)


async def test_200_streams_broken_after_5_frames_end_whole_and_once(
    database_url: str, tmp_path: Path
) -> None:
    async with routed_rig(database_url, tmp_path, MODEL.format(extra=""), kind="vllm") as routed:
        routed.west.behavior.faults = {"sim-b": Faults(reset_after_frames=5)}
        bodies: list[str] = []
        limit = trio.CapacityLimiter(20)

        async def one() -> None:
            async with limit:
                r = await _stream(routed)
                assert r.status_code == 200
                bodies.append(r.text)

        async with trio.open_nursery() as nursery:
            for _ in range(200):
                nursery.start_soon(one)
        for body in bodies:
            text, ids, done = _text(body)
            assert (text, len(ids), done) == (HEALTHY, 1, 1), body[-400:]
            assert '"error"' not in body
        resets = routed.west.fault_statistics()["sim-b"]["reset"]
        assert resets >= 20  # many streams broke on west and went on at east


async def test_both_legs_are_billed(database_url: str, tmp_path: Path) -> None:
    async with routed_rig(database_url, tmp_path, MODEL.format(extra=""), kind="vllm") as routed:
        routed.west.behavior.faults = {"sim-b": Faults(reset_after_frames=5)}
        request = {
            "model": "ha",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        while not routed.west.fault_statistics().get("sim-b", Counter())["reset"]:
            r = await routed.rig.chat(request)  # until one went to west first, and broke
            assert _text(r.text)[0] == HEALTHY
        usage = [c for c in chunks(r.text) if c.get("usage")][-1]["usage"]
        assert usage["completion_tokens"] == 20  # the first leg's 5 words and the other 15
        # Billed: west's leg (its prompt estimated from the body, its 5 words) and east's as
        # east reported it (its prompt holding those 5 words again, its 15), at their prices.
        runtime = routed.rig.gateway.runtime
        price = runtime.registry.resolve("ha").price
        assert price is not None
        plan = await runtime.accountant.plan_of(routed.rig.gateway.org_id)
        pricing = pricing_for(price, plan)
        body = httpx.Request("POST", "http://x", json=request).content
        expected = pricing.charge(estimate_tokens(len(body)), 5) + pricing.charge(
            usage["prompt_tokens"] + 5, 15
        )
        _, rows = await ledger(routed.rig, settled=len(routed.east.requests))
        assert expected in [-row.amount_micros for row in rows]


async def test_without_failover_a_broken_stream_ends_with_the_error_frame(
    database_url: str, tmp_path: Path
) -> None:
    model = MODEL.format(extra="stream_failover = false")
    async with routed_rig(database_url, tmp_path, model, kind="vllm") as routed:
        routed.west.behavior.faults = {"sim-b": Faults(reset_after_frames=5)}
        outcomes = Counter()
        for _ in range(6):
            r = await _stream(routed)
            assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
            outcomes['"error"' in r.text] += 1
        assert outcomes[True] >= 1  # those that went to west broke, and said so


async def test_an_openai_deployment_is_asked_to_continue(database_url: str, tmp_path: Path) -> None:
    async with routed_rig(database_url, tmp_path, MODEL.format(extra="")) as routed:
        routed.west.behavior.faults = {"sim-b": Faults(reset_after_frames=5)}
        while not routed.west.fault_statistics().get("sim-b", Counter())["reset"]:
            r = await _stream(routed)
            _, ids, done = _text(r.text)
            assert r.status_code == 200 and len(ids) == 1 and done == 1
            assert '"error"' not in r.text
        continuation = json.loads(routed.east.requests[-1].body)
        assert continuation["messages"][-2]["role"] == "assistant"
        assert continuation["messages"][-2]["content"].startswith("tok0 tok1 tok2 tok3 tok4")
        assert continuation["messages"][-1]["role"] == "user"
        assert "continue_final_message" not in continuation
