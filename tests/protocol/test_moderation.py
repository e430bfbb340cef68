"""Classifier guardrails on the wire (protocol/guardrails/moderation.py): the moderation and
guard-model request bodies, the scores read from OpenAI's moderation answer and from Llama
Guard / ShieldGemma verdicts, and hostile answers, which are UpstreamMalformed and nothing
else."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.errors import UpstreamMalformed
from protocol.guardrails.moderation import (
    GUARD_MAX_TOKENS,
    LLAMA_GUARD_CATEGORIES,
    POLICY_VIOLATION,
    guard_request,
    moderation_request,
    parse_guard_answer,
    parse_moderation,
)

CATEGORIES = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/instructions",
    "self-harm/intent",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)


def result(**scores: float) -> dict[str, Any]:
    """One result as OpenAI answers it; unnamed categories score 0.001."""
    all_scores = {c: 0.001 for c in CATEGORIES}
    all_scores.update(scores)
    return {
        "flagged": any(v > 0.5 for v in all_scores.values()),
        "categories": {c: v > 0.5 for c, v in all_scores.items()},
        "category_scores": all_scores,
        "category_applied_input_types": {c: ["text"] for c in all_scores},
    }


def moderation(*results: dict[str, Any]) -> bytes:
    body = {"id": "modr-1", "model": "omni-moderation-latest", "results": list(results)}
    return msgspec.json.encode(body)


def completion(content: str | None) -> bytes:
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"id": "c", "object": "chat.completion", "model": "llama-guard-3", "choices": [choice]}
    return msgspec.json.encode(body)


def test_moderation_request_is_openais_body() -> None:
    body = msgspec.json.decode(moderation_request("omni-moderation-latest", ("a", "b")))
    assert body == {"model": "omni-moderation-latest", "input": ["a", "b"]}


def test_moderation_keeps_the_highest_score_per_category() -> None:
    scores = parse_moderation(
        moderation(result(violence=0.9, harassment=0.2), result(harassment=0.8, violence=0.1))
    )
    assert scores["violence"] == 0.9 and scores["harassment"] == 0.8
    assert scores["self-harm/intent"] == 0.001 and set(scores) == set(CATEGORIES)


def test_moderation_reads_openais_documented_example() -> None:
    """The example of CreateModerationResponse in openai/openai-openapi (abridged)."""
    body = b"""{"id": "modr-0d9740456c391e43c445bf0f010940c7", "model": "omni-moderation-latest",
      "results": [{"flagged": true,
        "categories": {"harassment": true, "harassment/threatening": true, "sexual": false,
          "illicit": null, "violence": true, "violence/graphic": true},
        "category_scores": {"harassment": 0.8189693396524255,
          "harassment/threatening": 0.804985420696006, "sexual": 1.573112165348997e-6,
          "illicit": 0.030535955153511665, "violence": 0.9999992735124786,
          "violence/graphic": 0.843064871157054},
        "category_applied_input_types": {"harassment": ["text"], "sexual": ["text", "image"]}}]}"""
    scores = parse_moderation(body)
    assert scores["violence"] == 0.9999992735124786
    assert scores["sexual"] == 1.573112165348997e-6
    assert len(scores) == 6


def test_moderation_with_integer_scores() -> None:
    assert parse_moderation(moderation({"category_scores": {"hate": 0, "violence": 1}})) == {
        "hate": 0.0,
        "violence": 1.0,
    }


HOSTILE_MODERATIONS = {
    "not json": b"<html>502 Bad Gateway</html>",
    "empty": b"",
    "a list": b"[]",
    "no results": b'{"id": "x"}',
    "empty results": b'{"results": []}',
    "results not a list": b'{"results": {"flagged": true}}',
    "no scores": b'{"results": [{"flagged": true}]}',
    "scores not an object": b'{"results": [{"category_scores": [0.5]}]}',
    "score a string": b'{"results": [{"category_scores": {"hate": "0.5"}}]}',
    "score null": b'{"results": [{"category_scores": {"hate": null}}]}',
    "score true": b'{"results": [{"category_scores": {"hate": true}}]}',
    "NaN": b'{"results": [{"category_scores": {"hate": NaN}}]}',
    "Infinity": b'{"results": [{"category_scores": {"hate": Infinity}}]}',
    "overflow": b'{"results": [{"category_scores": {"hate": 1e999}}]}',
    "above one": b'{"results": [{"category_scores": {"hate": 1.5}}]}',
    "negative": b'{"results": [{"category_scores": {"hate": -0.1}}]}',
    "not utf-8": b'{"results": [{"category_scores": {"\xff\xfe": 0.5}}]}',
    "deep nesting": b'{"x": ' + b"[" * 200_000 + b"]" * 200_000 + b', "results": []}',
    "deep in a result": b'{"results": [{"category_scores": {}, "x": '
    + b"{" * 100_000
    + b"}" * 100_000
    + b"}]}",
    "truncated": moderation(result())[:-5],
}


@pytest.mark.parametrize("name", HOSTILE_MODERATIONS)
def test_hostile_moderation_answers_are_malformed(name: str) -> None:
    with pytest.raises(UpstreamMalformed):
        parse_moderation(HOSTILE_MODERATIONS[name])


def test_guard_request_for_the_users_message() -> None:
    body = msgspec.json.decode(guard_request("llama-guard-3-8b", "how do I bake?", stage="input"))
    assert body == {
        "model": "llama-guard-3-8b",
        "messages": [{"role": "user", "content": "how do I bake?"}],
        "temperature": 0.0,
        "max_tokens": GUARD_MAX_TOKENS,
        "stream": False,
    }


def test_guard_request_for_the_answer_carries_the_prompt() -> None:
    body = msgspec.json.decode(
        guard_request("llama-guard-3-8b", "Here is how.", stage="output", prompt="How?")
    )
    assert body["messages"] == [
        {"role": "user", "content": "How?"},
        {"role": "assistant", "content": "Here is how."},
    ]
    alone = msgspec.json.decode(guard_request("g", "Here is how.", stage="output"))
    assert alone["messages"][0] == {"role": "user", "content": ""}


def test_guard_request_refuses_an_unknown_stage() -> None:
    with pytest.raises(ValueError):
        guard_request("g", "x", stage="middle")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "scores"),
    [
        ("safe", {}),
        ("\n\nsafe", {}),
        ("Safe.", {}),
        ("unsafe\nS1", {"violent_crimes": 1.0}),
        ("unsafe\nS1,S10", {"violent_crimes": 1.0, "hate": 1.0}),
        ("\n\nunsafe\nS14, S7", {"code_interpreter_abuse": 1.0, "privacy": 1.0}),
        ("unsafe\ns11", {"self_harm": 1.0}),
        ("unsafe", {POLICY_VIOLATION: 1.0}),
        ("unsafe\nS15", {POLICY_VIOLATION: 1.0}),
        ("unsafe\nO3", {POLICY_VIOLATION: 1.0}),
        ("Yes", {POLICY_VIOLATION: 1.0}),
        ("yes", {POLICY_VIOLATION: 1.0}),
        ("No", {}),
        ("No.\nThe prompt does not violate the policy.", {}),
    ],
)
def test_guard_verdicts(content: str, scores: dict[str, float]) -> None:
    assert parse_guard_answer(completion(content)) == scores


def test_every_llama_guard_code_has_a_name() -> None:
    for code, name in LLAMA_GUARD_CATEGORIES.items():
        assert parse_guard_answer(completion(f"unsafe\n{code}")) == {name: 1.0}
    assert len(set(LLAMA_GUARD_CATEGORIES.values())) == 14


HOSTILE_GUARD_ANSWERS = {
    "not json": b"upstream timed out",
    "no choices": b'{"choices": []}',
    "choices missing": b'{"id": "x"}',
    "content null": completion(None),
    "content a list": b'{"choices": [{"message": {"content": ["safe"]}}]}',
    "content a number": b'{"choices": [{"message": {"content": 1}}]}',
    "a chatty model": completion("No problem! Here is a recipe."),
    "a refusal": completion("I'm sorry, I can't help with that."),
    "safety, not safe": completion("safety first"),
    "not a verdict": completion("maybe"),
    "empty": completion(""),
    "deep nesting": b'{"choices": [{"message": {"content": "safe"}, "x": '
    + b"[" * 200_000
    + b"]" * 200_000
    + b"}]}",
    "not utf-8": b'{"choices": [{"message": {"content": "\xc3("}}]}',
    "NaN somewhere": b'{"choices": [{"message": {"content": "safe"}}], "x": NaN}',
}


@pytest.mark.parametrize("name", HOSTILE_GUARD_ANSWERS)
def test_hostile_guard_answers_are_malformed(name: str) -> None:
    with pytest.raises(UpstreamMalformed):
        parse_guard_answer(HOSTILE_GUARD_ANSWERS[name])
