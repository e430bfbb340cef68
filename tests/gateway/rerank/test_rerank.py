"""POST /v1/rerank over real HTTP against the simulated upstream, on both backends and through
both adapters: the API's result shape, sorting (the upstream answers unsorted), `top_n`,
`return_documents`, text objects, and what reaches the upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.gateway.rerank.support import rerank, rerank_requests, rerank_rig
from tests.inference import Rig

QUERY = "red apple pie"
DOCUMENTS = [
    "a green field",  # 0 of 3 words
    "apple pie with cream",  # 2
    "red apple pie recipe",  # 3
    "one red car",  # 1
]
RANKED = [(2, 1.0), (1, 0.666667), (3, 0.333333), (0, 0.0)]  # (index, score), best first
MODELS = {"rerank": "sim/sim-rerank", "rerank-english-v3.0": "co/rerank-english-v3.0"}


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with rerank_rig(database_url, tmp_path) as r:
        yield r


@pytest.mark.parametrize("model", sorted(MODELS))
async def test_results_are_sorted_with_the_specs_shape(rig: Rig, model: str) -> None:
    r = await rerank(rig, {"model": model, "query": QUERY, "documents": DOCUMENTS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"id", "model", "results", "usage", "meta"}
    assert isinstance(body["id"], str) and body["id"]
    assert body["model"] == MODELS[model]
    assert [(x["index"], x["relevance_score"]) for x in body["results"]] == RANKED
    for result in body["results"]:
        assert set(result) == {"index", "relevance_score", "document"}
        assert result["document"] == {"text": DOCUMENTS[result["index"]]}
    units = {"search_units": 4}
    assert body["usage"] == {"search_units": 4, "billed_units": units}
    assert body["meta"] == {"billed_units": units}
    # The upstream answered in request order: the sorting above is the gateway's.
    (sent,) = rerank_requests(rig)
    assert sent["model"] == MODELS[model].split("/")[1]
    assert sent["documents"] == DOCUMENTS and sent["query"] == QUERY
    assert sent["return_documents"] is False and sent["top_n"] == 4


@pytest.mark.parametrize("model", sorted(MODELS))
async def test_top_n_keeps_the_best_and_is_clamped(rig: Rig, model: str) -> None:
    body = {"model": model, "query": QUERY, "documents": DOCUMENTS, "top_n": 2}
    r = await rerank(rig, body)
    assert [(x["index"], x["relevance_score"]) for x in r.json()["results"]] == RANKED[:2]
    r = await rerank(rig, {**body, "top_n": 50})
    assert r.status_code == 200
    assert [x["index"] for x in r.json()["results"]] == [i for i, _ in RANKED]
    assert [q["top_n"] for q in rerank_requests(rig)] == [2, 4]
    # Billed per document sent, whatever top_n kept.
    assert r.json()["usage"]["search_units"] == 4


@pytest.mark.parametrize("model", sorted(MODELS))
async def test_return_documents_false_leaves_out_the_key(rig: Rig, model: str) -> None:
    body = {"model": model, "query": QUERY, "documents": DOCUMENTS, "return_documents": False}
    r = await rerank(rig, body)
    assert r.status_code == 200
    for result in r.json()["results"]:
        assert set(result) == {"index", "relevance_score"}


async def test_text_objects_and_strings_may_be_mixed(rig: Rig) -> None:
    documents = [{"text": DOCUMENTS[0]}, DOCUMENTS[1], {"text": DOCUMENTS[2], "title": "x"}]
    r = await rerank(rig, {"model": "rerank", "query": QUERY, "documents": documents})
    assert r.status_code == 200, r.text
    assert [(x["index"], x["document"]["text"]) for x in r.json()["results"]] == [
        (2, DOCUMENTS[2]),
        (1, DOCUMENTS[1]),
        (0, DOCUMENTS[0]),
    ]
    (sent,) = rerank_requests(rig)
    assert sent["documents"] == DOCUMENTS[:3]  # plain strings upstream


async def test_max_chunks_per_doc_goes_to_cohere_only(rig: Rig) -> None:
    for model in sorted(MODELS):
        body = {"model": model, "query": QUERY, "documents": DOCUMENTS, "max_chunks_per_doc": 3}
        assert (await rerank(rig, body)).status_code == 200
    compatible, cohere = rerank_requests(rig)  # sorted(MODELS): sim first
    assert cohere["max_chunks_per_doc"] == 3
    assert "max_chunks_per_doc" not in compatible


async def test_tei_style_answers_are_read(rig: Rig) -> None:
    r = await rerank(rig, {"model": "tei", "query": QUERY, "documents": DOCUMENTS})
    assert r.status_code == 200, r.text
    assert [(x["index"], x["relevance_score"]) for x in r.json()["results"]] == RANKED


async def test_scores_outside_0_to_1_are_ranked_then_clamped(rig: Rig) -> None:
    # The upstream sends score*20-10: 10.0, 3.33, -3.33, -10.0.
    r = await rerank(rig, {"model": "logits", "query": QUERY, "documents": DOCUMENTS})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["index"] for x in results] == [i for i, _ in RANKED]
    assert [x["relevance_score"] for x in results] == [1.0, 1.0, 0.0, 0.0]


async def test_models_list_shows_rerank_models(rig: Rig) -> None:
    r = await rig.gateway.client.get("/v1/models", headers=rig.gateway.auth(rig.key))
    listed = {m["id"]: m["owned_by"] for m in r.json()["data"]}
    assert listed["rerank"] == "sim" and listed["rerank-english-v3.0"] == "co"
    one = await rig.gateway.client.get(
        "/v1/models/rerank-english-v3.0", headers=rig.gateway.auth(rig.key)
    )
    assert one.status_code == 200 and one.json()["owned_by"] == "co"


async def test_openapi_documents_the_route(rig: Rig) -> None:
    r = await rig.gateway.client.get("/openapi.json")
    assert r.status_code == 200
    operation = r.json()["paths"]["/v1/rerank"]["post"]
    for status in ("200", "400", "401", "402", "413", "429", "502"):
        assert status in operation["responses"], status
