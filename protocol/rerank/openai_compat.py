"""OpenAI-compatible rerank servers (provider kinds openai, vllm, ollama): the Jina / Voyage /
vLLM `POST rerank` with `{model, query, documents, top_n, return_documents}`, answered with
`{results: [{index, relevance_score, document?}], usage?}`. Also read: Hugging Face TEI's
shape (`score` for `relevance_score`, `text` for the document, a bare list instead of
`{results}`), so a TEI-fronting proxy works. Their `usage` counts tokens, not search units: it
is not read (the route bills one unit per document). No I/O."""

from __future__ import annotations

import msgspec

from protocol.errors import UpstreamMalformed
from protocol.rerank.ranking import Scored, UpstreamAnswer, checked
from protocol.rerank.request import Ranking

PATH = "rerank"


class _Request(msgspec.Struct):
    model: str
    query: str
    documents: list[str]
    top_n: int
    return_documents: bool = False  # we answer with the client's own texts


class _Result(msgspec.Struct):
    index: int
    relevance_score: float | None = None
    score: float | None = None  # TEI


class _Answer(msgspec.Struct):
    results: list[_Result]


_decoder = msgspec.json.Decoder(_Answer | list[_Result])


def request_body(ranking: Ranking, upstream_model: str) -> bytes:
    return msgspec.json.encode(
        _Request(upstream_model, ranking.query, ranking.texts, ranking.top_n)
    )


def parse_answer(body: bytes, documents: int) -> UpstreamAnswer:
    """The checked scores; UpstreamMalformed for anything else (a result with neither
    `relevance_score` nor `score` included)."""
    try:
        answer = _decoder.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise UpstreamMalformed(f"not a rerank answer: {exc}") from None
    results = answer if isinstance(answer, list) else answer.results
    scores = []
    for r in results:
        score = r.relevance_score if r.relevance_score is not None else r.score
        if score is None:
            raise UpstreamMalformed(f"result {r.index} has no relevance_score")
        scores.append(Scored(r.index, score))
    return UpstreamAnswer(checked(scores, documents))
