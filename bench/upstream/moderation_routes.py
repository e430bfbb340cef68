"""OpenAI's moderation endpoint, `POST /v1/moderations`, with scores from trigger words
(classifier.py): `{"id", "model", "results": [{flagged, categories, category_scores,
category_applied_input_types}]}`, one result per input string. `input` may be a string, a list
of strings, or a list of multimodal parts (`{"type": "text", "text"}`, `{"type": "image_url"}`):
parts are one input, whose text is the parts' text. A category is flagged above 0.5.

The request's `model` (default `omni-moderation-latest`) is echoed, and selects per-model faults
like any other route. Hostile answers, chosen by the model name as in rerank_routes:
`hostile-text` (not JSON), `hostile-nan` (a NaN score), `hostile-empty` (no results),
`hostile-range` (a score of 1.5). Pure functions, as every route here.
"""

from __future__ import annotations

from typing import Any

import msgspec

from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.classifier import moderation_scores
from bench.upstream.completion import answer_id
from bench.upstream.openai_routes import error_reply
from bench.upstream.replies import JsonReply, Reply

PATH = "/v1/moderations"
DEFAULT_MODEL = "omni-moderation-latest"
FLAG_ABOVE = 0.5


class _ImageUrl(msgspec.Struct):
    url: str


class _Part(msgspec.Struct, tag_field="type", tag="text"):
    text: str


class _ImagePart(msgspec.Struct, tag_field="type", tag="image_url"):
    image_url: _ImageUrl


class _Request(msgspec.Struct):
    input: str | list[str | _Part | _ImagePart]
    model: str = DEFAULT_MODEL


_decoder = msgspec.json.Decoder(_Request)
_encode = msgspec.json.encode


def moderations(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return error_reply(401, "missing or malformed Authorization: Bearer header")
    try:
        asked = _decoder.decode(request.body)
    except msgspec.DecodeError as exc:
        return error_reply(400, str(exc), param="input")
    try:
        texts = _texts(asked.input)
    except ValueError:
        return error_reply(400, "input mixes strings and parts", param="input")
    if not texts:
        return error_reply(400, "input must not be empty", param="input")
    results = [_result(text) for text in texts]
    body: dict[str, Any] = {"id": answer_id("modr-"), "model": asked.model, "results": results}
    match asked.model:
        case "hostile-text":
            return JsonReply(200, b"<html>Bad gateway</html>")
        case "hostile-nan":
            encoded = _encode(body).replace(b'"violence":0.', b'"violence":NaN,"x":0.', 1)
            return JsonReply(200, encoded)
        case "hostile-empty":
            body["results"] = []
        case "hostile-range":
            results[0]["category_scores"]["violence"] = 1.5
    return JsonReply(200, _encode(body))


def _texts(given: str | list[str | _Part | _ImagePart]) -> list[str]:
    """One text per result: each string of a list of strings, or all the parts' text."""
    if isinstance(given, str):
        return [given]
    strings = [item for item in given if isinstance(item, str)]
    if len(strings) == len(given):
        return strings
    if strings:
        raise ValueError("mixed")
    return [" ".join(part.text for part in given if isinstance(part, _Part))]


def _result(text: str) -> dict[str, Any]:
    scores = moderation_scores(text)
    categories = {name: score > FLAG_ABOVE for name, score in scores.items()}
    return {
        "flagged": any(categories.values()),
        "categories": categories,
        "category_scores": scores,
        "category_applied_input_types": {name: ["text"] for name in scores},
    }
