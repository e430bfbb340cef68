"""From an upstream's scores to our answer: the checks every adapter's parsed answer goes
through (indices in range and unique, scores finite, no more results than documents), then the
sort, `top_n` and the API's result shape. No I/O.

Upstream answers are hostile until checked: a provider (or anything answering at its address)
may send any bytes. An answer that fails a check is `UpstreamMalformed`, which the route maps to
502 `upstream_bad_response`; nothing here trusts the upstream's order or its document texts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import msgspec

from protocol.errors import UpstreamMalformed
from protocol.rerank.request import Ranking


@dataclass(frozen=True, slots=True)
class Scored:
    index: int  # the document's position in the client's request
    score: float  # as the upstream sent it (finite, not yet clamped)


@dataclass(frozen=True, slots=True)
class UpstreamAnswer:
    """One adapter's reading of an upstream answer. `search_units`: what the provider says it
    billed (Cohere's `meta.billed_units.search_units`), None when it does not say."""

    scores: list[Scored]
    search_units: int | None = None


class ResultDocument(msgspec.Struct):
    text: str


class RerankResult(msgspec.Struct, omit_defaults=True):
    """`document` is left out entirely (not null) with `return_documents: false`."""

    index: int
    relevance_score: float
    document: ResultDocument | None = None


class BilledUnits(msgspec.Struct):
    search_units: int


class RerankUsage(msgspec.Struct):
    search_units: int
    billed_units: BilledUnits


class RerankMeta(msgspec.Struct):
    """Cohere's name for the billed units; its SDK reads `meta.billed_units.search_units`."""

    billed_units: BilledUnits


class RerankResponse(msgspec.Struct):
    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: RerankMeta


def checked(scores: list[Scored], documents: int) -> list[Scored]:
    """`scores` once every index is a distinct position among `documents` and every score
    finite; UpstreamMalformed otherwise. Fewer results than documents is fine (a provider may
    cut to `top_n` itself)."""
    if len(scores) > documents:
        raise UpstreamMalformed(f"{len(scores)} results for {documents} documents")
    seen: set[int] = set()
    for s in scores:
        if not 0 <= s.index < documents:
            raise UpstreamMalformed(f"result index {s.index} out of range")
        if s.index in seen:
            raise UpstreamMalformed(f"result index {s.index} repeated")
        if not math.isfinite(s.score):
            raise UpstreamMalformed(f"result score {s.score!r} is not a finite number")
        seen.add(s.index)
    return scores


def answer(
    ranking: Ranking, scores: list[Scored], *, answer_id: str, model: str, search_units: int
) -> RerankResponse:
    """The API's rerank result: sorted by score, highest first (ties: the earlier document
    first), cut to `top_n`, each score clamped into 0.0-1.0 only after sorting (so a provider
    sending raw logits still ranks as it meant), documents the client's own texts."""
    ordered = sorted(scores, key=lambda s: (-s.score, s.index))[: ranking.top_n]
    texts = ranking.texts if ranking.return_documents else None
    results = [
        RerankResult(
            s.index,
            min(1.0, max(0.0, s.score)),
            None if texts is None else ResultDocument(texts[s.index]),
        )
        for s in ordered
    ]
    billed = BilledUnits(search_units)
    return RerankResponse(
        answer_id, model, results, RerankUsage(search_units, billed), RerankMeta(billed)
    )
