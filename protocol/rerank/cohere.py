"""Cohere's rerank API (v1), provider kind `cohere`: `POST rerank` under the provider's
base_url (https://api.cohere.com/v1 → /v1/rerank). Cohere reports what it billed in
`meta.billed_units.search_units`; that is read here, and capped by the route. Its error bodies
(`{"message": ...}`) are read by protocol/anthropic.upstream_error_message. No I/O."""

from __future__ import annotations

import math
from typing import Annotated

import msgspec

from protocol.errors import UpstreamMalformed
from protocol.rerank.ranking import Scored, UpstreamAnswer, checked
from protocol.rerank.request import Ranking

PATH = "rerank"


class _Request(msgspec.Struct, omit_defaults=True):
    model: str
    query: str
    documents: list[str]
    top_n: int
    return_documents: bool  # always false: we answer with the client's own texts
    max_chunks_per_doc: int | None = None


class _Result(msgspec.Struct):
    index: int
    relevance_score: float


class _BilledUnits(msgspec.Struct):
    search_units: Annotated[float, msgspec.Meta(ge=0)] | None = None


class _Meta(msgspec.Struct):
    billed_units: _BilledUnits | None = None


class _Answer(msgspec.Struct):
    results: list[_Result]
    meta: _Meta | None = None


_decoder = msgspec.json.Decoder(_Answer)


def request_body(ranking: Ranking, upstream_model: str) -> bytes:
    """The documents go as plain strings, whatever form the client sent them in."""
    return msgspec.json.encode(
        _Request(
            upstream_model,
            ranking.query,
            ranking.texts,
            ranking.top_n,
            False,
            ranking.max_chunks_per_doc,
        )
    )


def parse_answer(body: bytes, documents: int) -> UpstreamAnswer:
    """The checked scores and billed search units (fractions rounded up); UpstreamMalformed
    for anything else."""
    try:
        answer = _decoder.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise UpstreamMalformed(f"not a Cohere rerank answer: {exc}") from None
    scores = checked([Scored(r.index, r.relevance_score) for r in answer.results], documents)
    billed = answer.meta.billed_units if answer.meta is not None else None
    units = billed.search_units if billed is not None else None
    if units is not None and not math.isfinite(units):
        raise UpstreamMalformed("billed search units are not a finite number")
    return UpstreamAnswer(scores, None if units is None else math.ceil(units))
