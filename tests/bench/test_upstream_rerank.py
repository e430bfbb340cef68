"""The simulated upstream's rerank routes, called as pure functions and through dispatch: word
overlap scores, request-order (unsorted) answers, top_n, return_documents, Cohere's meta and
error bodies, and the hostile models."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.dispatch import route
from bench.upstream.replies import JsonReply
from bench.upstream.rerank_routes import COHERE_PATH, OPENAI_PATH, score

AUTH = {"authorization": "Bearer k"}
BODY = {"query": "red apple", "documents": ["pear", "red apple", {"text": "apple"}]}


def call(path: str, body: Any, headers: dict[str, str] | None = None, **knobs: Any) -> JsonReply:
    request = RecordedRequest(
        "POST", path, AUTH if headers is None else headers, msgspec.json.encode(body)
    )
    reply = route(request, UpstreamBehavior(**knobs))
    assert isinstance(reply, JsonReply)
    return reply


def test_scores_are_the_share_of_query_words_found() -> None:
    assert score("red apple", "a red apple") == 1.0
    assert score("red apple", "apple") == 0.5
    assert score("Red", "red") == 1.0
    assert score("", "x") == 0.0


@pytest.mark.parametrize("path", [OPENAI_PATH, COHERE_PATH])
def test_results_come_in_request_order(path: str) -> None:
    reply = call(path, {**BODY, "model": "m"})
    assert reply.status == 200
    results = msgspec.json.decode(reply.body)["results"]
    assert [(r["index"], r["relevance_score"]) for r in results] == [(0, 0.0), (1, 1.0), (2, 0.5)]
    assert results[2]["document"] == {"text": "apple"}


@pytest.mark.parametrize("path", [OPENAI_PATH, COHERE_PATH])
def test_top_n_and_return_documents(path: str) -> None:
    reply = call(path, {**BODY, "model": "m", "top_n": 2, "return_documents": False})
    results = msgspec.json.decode(reply.body)["results"]
    assert results == [{"index": 1, "relevance_score": 1.0}, {"index": 2, "relevance_score": 0.5}]


def test_cohere_reports_billed_units() -> None:
    body = msgspec.json.decode(call(COHERE_PATH, {**BODY, "model": "m"}).body)
    assert body["meta"]["billed_units"] == {"search_units": 3}
    billed = msgspec.json.decode(call(COHERE_PATH, {**BODY, "model": "billed-1"}).body)
    assert billed["meta"]["billed_units"] == {"search_units": 1}


def test_tei_style_is_a_bare_list() -> None:
    body = msgspec.json.decode(call(OPENAI_PATH, {**BODY, "model": "tei-style"}).body)
    assert body[1] == {"index": 1, "score": 1.0, "text": "red apple"}


def test_cohere_errors_are_message_bodies() -> None:
    reply = call(COHERE_PATH, {**BODY, "model": "m"}, fail_status=429, retry_after="3")
    assert (reply.status, msgspec.json.decode(reply.body)) == (
        429,
        {"message": "simulated upstream failure (429)"},
    )
    assert ("retry-after", "3") in reply.headers
    assert call(COHERE_PATH, {**BODY, "model": "m"}, headers={}).status == 401
    rejected = call(COHERE_PATH, BODY, headers={"authorization": "Bearer sk-bad-1"})
    assert rejected.status == 401 and "message" in msgspec.json.decode(rejected.body)
    assert call(COHERE_PATH, {"model": 1}).status == 400
    assert "error" in msgspec.json.decode(call(OPENAI_PATH, {"model": 1}).body)


@pytest.mark.parametrize("path", [OPENAI_PATH, COHERE_PATH])
def test_hostile_models(path: str) -> None:
    def results(model: str) -> list[dict[str, Any]]:
        reply = call(path, {**BODY, "model": model})
        parsed: list[dict[str, Any]] = msgspec.json.decode(reply.body)["results"]
        return parsed

    assert call(path, {**BODY, "model": "hostile-text"}).body.startswith(b"<html>")
    assert b"NaN" in call(path, {**BODY, "model": "hostile-nan"}).body
    assert results("hostile-index")[0]["index"] == 3
    assert len({r["index"] for r in results("hostile-duplicate")}) == 3
    assert len(results("hostile-duplicate")) == 4
    assert len(results("hostile-many")) > 3
    assert results("hostile-logits")[1]["relevance_score"] == 10.0


def test_cohere_lists_models_for_key_checks() -> None:
    request = RecordedRequest("GET", "/cohere/v1/models", AUTH, b"")
    reply = route(request, UpstreamBehavior())
    assert isinstance(reply, JsonReply) and reply.status == 200
    assert msgspec.json.decode(reply.body)["models"][0]["name"] == "rerank-english-v3.0"
    refused = route(RecordedRequest("GET", "/cohere/v1/models", {}, b""), UpstreamBehavior())
    assert isinstance(refused, JsonReply) and refused.status == 401
