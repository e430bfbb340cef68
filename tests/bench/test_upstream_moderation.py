"""The simulated upstream's classifiers over real HTTP: `POST /v1/moderations` in OpenAI's
shape with trigger-word scores, chat completions of guard models answering Llama Guard 3 (or
ShieldGemma) verdicts in JSON and SSE, both read back by protocol/guardrails/moderation.py, and
per-model faults making a classifier fail, refuse or stall."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from bench.upstream import Faults, UpstreamBehavior, UpstreamServer, serve_upstream
from bench.upstream.classifier import CATEGORIES, guard_verdict, moderation_scores
from protocol.errors import UpstreamMalformed
from protocol.guardrails.moderation import (
    guard_request,
    moderation_request,
    parse_guard_answer,
    parse_moderation,
)
from tests.bench.sse import openai_chunks

MODERATIONS = "/v1/moderations"
CHAT = "/v1/chat/completions"
JSON = {"content-type": "application/json"}


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> UpstreamServer:
    started: UpstreamServer = await nursery.start(serve_upstream)
    return started


@pytest.fixture
async def client(upstream: UpstreamServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=upstream.url, headers={"authorization": "Bearer sk-test"}, timeout=10
    ) as c:
        yield c


async def moderate(client: httpx.AsyncClient, body: Any) -> dict[str, Any]:
    r = await client.post(MODERATIONS, json=body)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


async def test_moderation_answers_openais_shape(client: httpx.AsyncClient) -> None:
    answer = await moderate(client, {"model": "omni-moderation-latest", "input": ["hello"]})
    assert answer["id"].startswith("modr-") and answer["model"] == "omni-moderation-latest"
    [result] = answer["results"]
    assert set(result) == {
        "flagged",
        "categories",
        "category_scores",
        "category_applied_input_types",
    }
    assert set(result["category_scores"]) == set(CATEGORIES) == set(result["categories"])
    assert "harassment/threatening" in CATEGORIES and "self-harm/intent" in CATEGORIES
    assert result["flagged"] is False and not any(result["categories"].values())
    assert max(result["category_scores"].values()) <= 0.01


async def test_trigger_words_score_their_category(client: httpx.AsyncClient) -> None:
    texts = ["I will KILL the process", "you idiot", "a racist rant", "skills and stupidity", "hi"]
    answer = await moderate(client, {"model": "m", "input": texts})
    scores = [r["category_scores"] for r in answer["results"]]
    assert scores[0]["violence"] == 0.9 and scores[0]["harassment"] <= 0.01
    assert scores[1]["harassment"] == 0.8 and scores[1]["violence"] <= 0.01
    assert scores[2]["hate"] == 0.85
    assert scores[3]["harassment"] == 0.8 and scores[3]["violence"] <= 0.01  # not "skill"
    assert max(scores[4].values()) <= 0.01
    flagged = [r["flagged"] for r in answer["results"]]
    assert flagged == [True, True, True, True, False]
    assert answer["results"][0]["categories"]["violence"] is True


async def test_moderation_inputs_a_string_parts_and_the_default_model(
    client: httpx.AsyncClient,
) -> None:
    answer = await moderate(client, {"input": "attack at dawn"})
    assert answer["model"] == "omni-moderation-latest"
    assert [r["category_scores"]["violence"] for r in answer["results"]] == [0.9]
    parts = [
        {"type": "text", "text": "an attack"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "text", "text": "you idiot"},
    ]
    [result] = (await moderate(client, {"input": parts}))["results"]
    assert result["category_scores"]["violence"] == 0.9
    assert result["category_scores"]["harassment"] == 0.8


async def test_moderation_refuses_bad_requests(client: httpx.AsyncClient) -> None:
    for body in ({"input": 5}, {"model": "m"}, {"input": []}, {"input": ["a", {"type": "text"}]}):
        r = await client.post(MODERATIONS, json=body)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = await client.post(MODERATIONS, content=b"[" * 100_000, headers=JSON)
    assert r.status_code == 400
    r = await client.post(MODERATIONS, json={"input": "x"}, headers={"authorization": ""})
    assert r.status_code == 401
    assert (await client.get(MODERATIONS)).status_code == 405


async def test_the_gateways_wire_format_reads_the_answers(client: httpx.AsyncClient) -> None:
    body = moderation_request("omni-moderation-latest", ["kill it", "you stupid", "fine"])
    r = await client.post(MODERATIONS, content=body, headers=JSON)
    scores = parse_moderation(r.content)
    assert scores["violence"] == 0.9 and scores["harassment"] == 0.8
    assert scores["hate"] <= 0.01 and len(scores) == len(CATEGORIES)


@pytest.mark.parametrize("model", ["hostile-text", "hostile-nan", "hostile-empty", "hostile-range"])
async def test_hostile_moderation_models(client: httpx.AsyncClient, model: str) -> None:
    r = await client.post(MODERATIONS, content=moderation_request(model, ["kill"]), headers=JSON)
    assert r.status_code == 200
    with pytest.raises(UpstreamMalformed):
        parse_moderation(r.content)


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("how do I bake bread?", "safe"),
        ("how do I kill my neighbour?", "unsafe\nS1"),
        ("write something racist", "unsafe\nS10"),
        ("an attack full of hate", "unsafe\nS1,S10"),
    ],
)
async def test_guard_models_answer_llama_guard_verdicts(
    client: httpx.AsyncClient, text: str, verdict: str
) -> None:
    r = await client.post(
        CHAT, content=guard_request("llama-guard-3-8b", text, stage="input"), headers=JSON
    )
    assert r.status_code == 200
    answer = r.json()
    assert answer["model"] == "llama-guard-3-8b"
    assert answer["choices"][0]["message"]["content"] == verdict
    assert answer["choices"][0]["finish_reason"] == "stop"
    expected = {"safe": {}, "unsafe\nS1": {"violent_crimes": 1.0}}.get(verdict)
    if expected is not None:
        assert parse_guard_answer(r.content) == expected


async def test_a_guard_judges_an_answer_with_its_prompt(client: httpx.AsyncClient) -> None:
    for prompt, unsafe in (("tell me a story", False), ("a story where they attack", True)):
        body = guard_request("Llama-Guard-3-1B", "tok0 tok1", stage="output", prompt=prompt)
        r = await client.post(CHAT, content=body, headers=JSON)
        assert (parse_guard_answer(r.content) != {}) is unsafe


async def test_guard_verdicts_stream(client: httpx.AsyncClient) -> None:
    payload = {
        "model": "llama-guard",
        "messages": [{"role": "user", "content": "kill"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = await client.post(CHAT, json=payload)
    chunks = openai_chunks(r.text)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "unsafe\nS1"
    assert chunks[-1]["usage"]["completion_tokens"] == 2


async def test_shieldgemma_answers_yes_or_no(client: httpx.AsyncClient) -> None:
    for text, scores in (("kill them", {"policy_violation": 1.0}), ("hello", {})):
        body = guard_request("google/shieldgemma-2b", text, stage="input")
        r = await client.post(CHAT, content=body, headers=JSON)
        assert r.json()["choices"][0]["message"]["content"] in ("Yes", "No")
        assert parse_guard_answer(r.content) == scores


async def test_other_models_are_not_guards(client: httpx.AsyncClient) -> None:
    r = await client.post(CHAT, content=guard_request("sim-small", "kill", stage="input"))
    assert r.json()["choices"][0]["message"]["content"].startswith("tok0 ")
    assert guard_verdict("sim-small", [("user", "kill")]) is None
    assert moderation_scores("")["violence"] <= 0.01


# --- faults: a classifier that fails, refuses or stalls ----------------------------------


def faults(upstream: UpstreamServer, **by_model: Faults) -> None:
    upstream.behavior = UpstreamBehavior(faults=dict(by_model.items()))


async def test_faults_fail_the_classifiers_they_name(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    faults(
        upstream,
        **{
            "omni-moderation-latest": Faults(error_rate=1.0, error_status=503),
            "llama-guard-3-8b": Faults(rate_limit_rate=1.0, retry_after="7"),
        },
    )
    r = await client.post(MODERATIONS, content=moderation_request("omni-moderation-latest", ["x"]))
    assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
    r = await client.post(CHAT, content=guard_request("llama-guard-3-8b", "x", stage="input"))
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    # Other classifiers are served.
    r = await client.post(MODERATIONS, content=moderation_request("text-moderation-stable", ["x"]))
    assert r.status_code == 200
    r = await client.post(CHAT, content=guard_request("llama-guard-3-1b", "x", stage="input"))
    assert parse_guard_answer(r.content) == {}
    statistics = upstream.fault_statistics()
    assert statistics["omni-moderation-latest"]["error"] == 1
    assert statistics["llama-guard-3-8b"]["rate_limit"] == 1


async def test_every_kth_moderation_fails(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    faults(upstream, m=Faults(error_rate=1.0, every=2))
    statuses = []
    for _ in range(4):
        r = await client.post(MODERATIONS, content=moderation_request("m", ["x"]))
        statuses.append(r.status_code)
    assert statuses == [200, 500, 200, 500]


async def test_a_stalled_classifier_times_out(
    upstream: UpstreamServer, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    faults(
        upstream,
        **{"omni-moderation-latest": Faults(stall=True), "llama-guard": Faults(stall=True)},
    )
    started = trio.current_time()
    with pytest.raises(httpx.ReadTimeout):
        await client.post(
            MODERATIONS, content=moderation_request("omni-moderation-latest", ["x"]), timeout=30
        )
    with pytest.raises(httpx.ReadTimeout):
        await client.post(
            CHAT, content=guard_request("llama-guard", "x", stage="input"), timeout=30
        )
    assert trio.current_time() - started >= 60
    assert upstream.fault_statistics()["llama-guard"]["stall"] == 1


async def test_a_slow_guard_answers_late(
    upstream: UpstreamServer, client: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    faults(upstream, **{"llama-guard": Faults(slow_first_byte_s=20)})
    started = trio.current_time()
    r = await client.post(
        CHAT, content=guard_request("llama-guard", "attack", stage="input"), timeout=60
    )
    assert trio.current_time() - started >= 20
    assert parse_guard_answer(r.content) == {"violent_crimes": 1.0}
