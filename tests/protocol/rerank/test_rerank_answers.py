"""Upstream rerank answers read by the two adapters and turned into our result, without I/O:
hostile answers are UpstreamMalformed, sorting and clamping are ours."""

from __future__ import annotations

import math

import msgspec
import pytest

from protocol.errors import UpstreamMalformed
from protocol.rerank import adapter_for, cohere, openai_compat
from protocol.rerank.ranking import Scored, answer, checked
from protocol.rerank.request import Ranking

RANKING = Ranking("m", "q", ["d0", "d1", "d2"], 3, True, None)


def encode(value: object) -> bytes:
    return msgspec.json.encode(value)


def test_each_kind_has_its_adapter() -> None:
    assert adapter_for("cohere").parse_answer is cohere.parse_answer
    for kind in ("openai", "vllm", "ollama"):
        assert adapter_for(kind).parse_answer is openai_compat.parse_answer


def test_request_bodies() -> None:
    chunked = Ranking("m", "q", ["a"], 1, False, 4)
    assert msgspec.json.decode(cohere.request_body(chunked, "up")) == {
        "model": "up",
        "query": "q",
        "documents": ["a"],
        "top_n": 1,
        "return_documents": False,
        "max_chunks_per_doc": 4,
    }
    assert msgspec.json.decode(openai_compat.request_body(chunked, "up")) == {
        "model": "up",
        "query": "q",
        "documents": ["a"],
        "top_n": 1,
        "return_documents": False,
    }
    assert "max_chunks_per_doc" not in msgspec.json.decode(cohere.request_body(RANKING, "u"))


def test_cohere_billed_units_are_read_and_rounded_up() -> None:
    body = {"results": [{"index": 1, "relevance_score": 0.5}], "meta": {"billed_units": {}}}
    assert cohere.parse_answer(encode(body), 3).search_units is None
    body["meta"] = {"billed_units": {"search_units": 1.2}}
    parsed = cohere.parse_answer(encode(body), 3)
    assert parsed.search_units == 2 and parsed.scores == [Scored(1, 0.5)]
    body["meta"] = {"billed_units": {"search_units": -1}}
    with pytest.raises(UpstreamMalformed):
        cohere.parse_answer(encode(body), 3)


@pytest.mark.parametrize(
    "body",
    [
        {"results": [{"index": 0, "relevance_score": 0.1}], "usage": {"total_tokens": 3}},
        [{"index": 0, "score": 0.1, "text": "d0"}],
        {"results": [{"index": 0, "relevance_score": 0.1, "document": {"text": "x"}}]},
    ],
)
def test_openai_compatible_shapes(body: object) -> None:
    parsed = openai_compat.parse_answer(encode(body), 3)
    assert parsed.scores == [Scored(0, 0.1)] and parsed.search_units is None


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"{}",
        b'{"results": [{"index": 3, "relevance_score": 0.1}]}',
        b'{"results": [{"index": -1, "relevance_score": 0.1}]}',
        b'{"results": [{"index": 0, "relevance_score": NaN}]}',
        b'{"results": [{"index": 0, "relevance_score": 1e999}]}',
        b'{"results": [{"index": 0, "relevance_score": "high"}]}',
        b'{"results": [{"index": 0}]}',
        b'{"results": [{"index": 0, "relevance_score": 0.1}, {"index": 0, "relevance_score": 1}]}',
        b'{"results": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    ],
)
@pytest.mark.parametrize("parse", [cohere.parse_answer, openai_compat.parse_answer])
def test_hostile_answers(raw: bytes, parse: object) -> None:
    with pytest.raises(UpstreamMalformed):
        parse(raw, 3)  # type: ignore[operator]


def test_checked_refuses_non_finite_scores_and_too_many_results() -> None:
    with pytest.raises(UpstreamMalformed):
        checked([Scored(0, math.nan)], 3)
    with pytest.raises(UpstreamMalformed):
        checked([Scored(0, math.inf)], 3)
    with pytest.raises(UpstreamMalformed):
        checked([Scored(0, 0.1), Scored(1, 0.1)], 1)
    assert checked([Scored(2, 0.3)], 3) == [Scored(2, 0.3)]


def test_answer_sorts_ties_by_index_clamps_after_sorting_and_cuts_to_top_n() -> None:
    scores = [Scored(0, 0.5), Scored(1, 7.0), Scored(2, 0.5)]
    out = answer(RANKING, scores, answer_id="id", model="p/m", search_units=3)
    assert [(r.index, r.relevance_score) for r in out.results] == [(1, 1.0), (0, 0.5), (2, 0.5)]
    assert [r.document.text for r in out.results if r.document] == ["d1", "d0", "d2"]
    top = Ranking("m", "q", RANKING.texts, 1, False, None)
    out = answer(top, [Scored(0, -2.0), Scored(1, -1.0)], answer_id="id", model="m", search_units=2)
    assert msgspec.json.decode(msgspec.json.encode(out)) == {
        "id": "id",
        "model": "m",
        "results": [{"index": 1, "relevance_score": 0.0}],
        "usage": {"search_units": 2, "billed_units": {"search_units": 2}},
        "meta": {"billed_units": {"search_units": 2}},
    }
