"""Every status of the API's rerank error table (400, 401, 402, 413, 429) and the others the route
answers (403), over real HTTP, in the OpenAI error shape; requests refused before the
upstream never reach it. Hostile client bodies are 400s, never a crash."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from protocol.rerank.request import MAX_DOCUMENTS
from tests.gateway.keys_client import create_key, error_of
from tests.gateway.rerank.support import MAX_DOCUMENT_TOKENS, rerank, rerank_requests, rerank_rig
from tests.inference import Rig

BODY = {"model": "rerank", "query": "red apple", "documents": ["an apple", "a pear"]}


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with rerank_rig(database_url, tmp_path) as r:
        yield r


async def refused(rig: Rig, body: Any, status: int, key: str | None = None) -> dict[str, Any]:
    """The error of a request that must be refused before any upstream call."""
    if isinstance(body, bytes):
        r = await rig.gateway.client.post(
            "/v1/rerank", content=body, headers=rig.gateway.auth(key or rig.key)
        )
    else:
        r = await rerank(rig, body, key)
    assert r.status_code == status, r.text
    assert rerank_requests(rig) == []
    return error_of(r)


@pytest.mark.parametrize(
    ("change", "param", "code"),
    [
        ({"documents": []}, "documents", None),
        ({"query": ""}, "query", None),
        ({"query": "  "}, "query", None),
        ({"query": "word " * MAX_DOCUMENT_TOKENS}, "query", "query_too_long"),
        ({"documents": ["x"] * (MAX_DOCUMENTS + 1)}, "documents", "too_many_documents"),
        ({"top_n": 0}, "top_n", None),
        ({"top_n": "2"}, "top_n", None),
        ({"max_chunks_per_doc": 0}, "max_chunks_per_doc", None),
        ({"return_documents": "no"}, "return_documents", None),
        ({"documents": [1, 2]}, "documents[0]", None),
        ({"documents": [{"title": "no text"}]}, "documents[0].text", None),
        ({"documents": "one string"}, "documents", None),
        ({"query": ["a"]}, "query", None),
    ],
)
async def test_invalid_bodies_are_400(
    rig: Rig, change: dict[str, Any], param: str, code: str | None
) -> None:
    error = await refused(rig, {**BODY, **change}, 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code


async def test_a_query_at_the_limit_is_accepted(rig: Rig) -> None:
    query = "x" * (MAX_DOCUMENT_TOKENS // 2 * 4)  # exactly half the document maximum
    r = await rerank(rig, {**BODY, "query": query})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"model": "rerank", "query": "q", "documents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"model": "rerank", "query": "q", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"model": "rerank", "query": "q", "documents": ["' + b"a" * 10 + b'"]',
    ],
)
async def test_hostile_bodies_are_400(rig: Rig, body: bytes) -> None:
    error = await refused(rig, body, 400)
    assert error["type"] == "invalid_request_error"
    r = await rerank(rig, BODY)  # and the gateway still serves
    assert r.status_code == 200


async def test_a_huge_document_count_is_400(rig: Rig) -> None:
    body = {**BODY, "documents": [""] * 200_000}  # under the 1 MiB body limit
    error = await refused(rig, body, 400)
    assert error["code"] == "too_many_documents"


async def test_an_over_long_document_is_413(rig: Rig) -> None:
    documents = ["short", "x" * (MAX_DOCUMENT_TOKENS * 4 + 1)]
    error = await refused(rig, {**BODY, "documents": documents}, 413)
    assert error["code"] == "document_too_long" and error["param"] == "documents[1]"
    assert error["type"] == "invalid_request_error"
    ok = await rerank(rig, {**BODY, "documents": ["x" * (MAX_DOCUMENT_TOKENS * 4)]})
    assert ok.status_code == 200


async def test_the_default_document_maximum_is_4096_tokens(rig: Rig) -> None:
    body = {**BODY, "model": "rerank-english-v3.0"}
    assert (await rerank(rig, {**body, "documents": ["x" * 4096 * 4]})).status_code == 200
    r = await rerank(rig, {**body, "documents": ["x" * (4096 * 4 + 1)]})
    assert r.status_code == 413


@pytest.mark.parametrize("model", ["haiku", "chatonly-rerank"])
async def test_a_model_that_cannot_rerank_is_400(rig: Rig, model: str) -> None:
    # An Anthropic model; a provider whose `supports` leaves out rerank.
    error = await refused(rig, {**BODY, "model": model}, 400)
    assert error["code"] == "unsupported_model" and error["param"] == "model"


async def test_an_unpriced_model_is_400(rig: Rig) -> None:
    error = await refused(rig, {**BODY, "model": "sim/unpriced-reranker"}, 400)
    assert error["code"] == "model_price_unknown"


@pytest.mark.parametrize("model", ["no-such-model", "nosuchprovider/x", "ft:rerank:org:s:1"])
async def test_an_unknown_model_is_400(rig: Rig, model: str) -> None:
    # The API's rerank table: an invalid model is 400 (not the 404 of the other inference routes).
    error = await refused(rig, {**BODY, "model": model}, 400)
    assert error == {
        "message": error["message"],
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    assert model in error["message"]


async def test_a_missing_or_invalid_key_is_401(rig: Rig) -> None:
    r = await rig.gateway.client.post("/v1/rerank", json=BODY)
    assert r.status_code == 401
    assert error_of(r)["type"] == "authentication_error"
    await refused(rig, BODY, 401, key="service_sk_live_nosuchkey0000000000000000")


async def test_the_rerank_scope_is_needed(rig: Rig) -> None:
    chat_only = (await create_key(rig.gateway, name="c", scopes=["chat:completions"]))["key"]
    error = await refused(rig, BODY, 403, key=chat_only)
    assert error["type"] == "permission_error"
    rerank_only = (await create_key(rig.gateway, name="r", scopes=["rerank"]))["key"]
    assert (await rerank(rig, BODY, rerank_only)).status_code == 200


async def test_allowed_models_apply(rig: Rig) -> None:
    key = (await create_key(rig.gateway, name="a", allowed_models=["rerank"]))["key"]
    error = await refused(rig, {**BODY, "model": "rerank-english-v3.0"}, 403, key=key)
    assert error["code"] == "model_not_allowed"
    assert (await rerank(rig, BODY, key)).status_code == 200


async def test_the_keys_rate_limit_is_429(rig: Rig) -> None:
    key = (await create_key(rig.gateway, name="slow", rate_limit_rpm=1))["key"]
    assert (await rerank(rig, BODY, key)).status_code == 200
    r = await rerank(rig, BODY, key)
    assert r.status_code == 429
    assert error_of(r)["code"] == "rate_limit_exceeded"
    assert int(r.headers["retry-after"]) >= 1
    assert len(rerank_requests(rig)) == 1


async def test_without_credit_it_is_402(database_url: str, tmp_path: Path) -> None:
    async with rerank_rig(database_url, tmp_path, credit_usd=None) as rig:
        for model in ("rerank", "rerank-english-v3.0"):
            error = await refused(rig, {**BODY, "model": model}, 402)
            assert error["code"] == "insufficient_credits"
