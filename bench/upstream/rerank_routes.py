"""Rerank, in the OpenAI-compatible (Jina / vLLM) format at `/v1/rerank` and in Cohere's v1
format at `/cohere/v1/rerank` (a test's cohere provider uses base_url `<upstream>/cohere/v1`).

Scores are deterministic: the share of the query's distinct words found in the document (0.0
to 1.0). Results come back in request order, NOT sorted, so a gateway must sort them itself;
`top_n` keeps the best N (ties: the earlier document) but still answers them in request order.
Cohere answers carry `meta.billed_units.search_units` (one per document unless the model says
otherwise, below).

Hostile answers, chosen by the model name so a test needs no knob: `hostile-index` (an index
past the last document), `hostile-duplicate` (one index twice), `hostile-nan` (a NaN score),
`hostile-text` (not JSON), `hostile-many` (more results than documents), `hostile-logits`
(finite scores outside 0..1), `tei-style` (a bare list with `score`/`text`, OpenAI route only),
`billed-<n>` (Cohere: report n search units). Pure functions, as every route here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.openai_routes import error_reply
from bench.upstream.replies import JsonReply, Reply

OPENAI_PATH = "/v1/rerank"
COHERE_PATH = "/cohere/v1/rerank"
COHERE_MODELS_PATH = "/cohere/v1/models"  # what the gateway calls to check an org's own key
COHERE_PREFIX = "/cohere/"


class _Document(msgspec.Struct):
    text: str


class _Request(msgspec.Struct):
    model: str
    query: str
    documents: list[str | _Document]
    top_n: int | None = None
    return_documents: bool = True
    max_chunks_per_doc: int | None = None


_decoder = msgspec.json.Decoder(_Request)
_encode = msgspec.json.encode


def cohere_error(status: int, message: str, headers: Sequence[tuple[str, str]] = ()) -> JsonReply:
    """Cohere's error body: `{"message": ...}`."""
    return JsonReply(status, _encode({"message": message}), headers)


def cohere_fail_reply(status: int, retry_after: str | None) -> JsonReply:
    headers = [("retry-after", retry_after)] if retry_after is not None else []
    return cohere_error(status, f"simulated upstream failure ({status})", headers)


def score(query: str, document: str) -> float:
    """The share of the query's distinct (lower-cased) words that occur in the document."""
    wanted = set(query.lower().split())
    if not wanted:
        return 0.0
    return round(len(wanted & set(document.lower().split())) / len(wanted), 6)


def openai_rerank(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    if not _bearer(request):
        return error_reply(401, "missing or malformed Authorization: Bearer header")
    try:
        asked = _decoder.decode(request.body)
    except msgspec.DecodeError as exc:
        return error_reply(400, str(exc))
    if asked.model == "tei-style":
        return JsonReply(200, _encode([_tei(r) for r in _results(asked)]))
    body = {"model": asked.model, "results": _results(asked), "usage": {"total_tokens": 10}}
    return _maybe_hostile(asked, body)


def cohere_rerank(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    if not _bearer(request):
        return cohere_error(401, "no api key supplied")
    try:
        asked = _decoder.decode(request.body)
    except msgspec.DecodeError as exc:
        return cohere_error(400, f"invalid request: {exc}")
    units = len(asked.documents)
    billed = asked.model.removeprefix("billed-")
    if billed != asked.model and billed.isdigit():
        units = int(billed)
    body = {
        "id": "sim-rerank-id",
        "results": _results(asked),
        "meta": {"api_version": {"version": "1"}, "billed_units": {"search_units": units}},
    }
    return _maybe_hostile(asked, body)


def cohere_models(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    if not _bearer(request):
        return cohere_error(401, "no api key supplied")
    models = [{"name": "rerank-english-v3.0", "endpoints": ["rerank"]}]
    return JsonReply(200, _encode({"models": models}))


def _bearer(request: RecordedRequest) -> bool:
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(credential.strip())


def _texts(asked: _Request) -> list[str]:
    return [d if isinstance(d, str) else d.text for d in asked.documents]


def _results(asked: _Request) -> list[dict[str, Any]]:
    """The top `top_n` documents, answered in request order (deliberately unsorted)."""
    texts = _texts(asked)
    scored = [(score(asked.query, t), i) for i, t in enumerate(texts)]
    if asked.model == "hostile-logits":
        scored = [(s * 20 - 10, i) for s, i in scored]
    keep = len(texts) if asked.top_n is None else asked.top_n
    best = sorted(scored, key=lambda p: (-p[0], p[1]))[:keep]
    results = []
    for s, i in sorted(best, key=lambda p: p[1]):
        result: dict[str, Any] = {"index": i, "relevance_score": s}
        if asked.return_documents:
            result["document"] = {"text": texts[i]}
        results.append(result)
    return results


def _tei(result: dict[str, Any]) -> dict[str, Any]:
    tei = {"index": result["index"], "score": result["relevance_score"]}
    if "document" in result:
        tei["text"] = result["document"]["text"]
    return tei


def _maybe_hostile(asked: _Request, body: dict[str, Any]) -> JsonReply:
    results: list[dict[str, Any]] = body["results"]
    match asked.model:
        case "hostile-text":
            return JsonReply(200, b"<html>Bad gateway</html>")
        case "hostile-nan":
            encoded = _encode(body)
            return JsonReply(
                200, encoded.replace(b'"relevance_score":', b'"relevance_score":NaN,"x":', 1)
            )
        case "hostile-index":
            results[0]["index"] = len(asked.documents)
        case "hostile-duplicate":
            results.append(dict(results[0]))
        case "hostile-many":
            results.extend(dict(results[0], index=i) for i in range(len(asked.documents) + 1))
    return JsonReply(200, _encode(body))
