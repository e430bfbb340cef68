"""The Cohere Python SDK's `rerank` works against the gateway unchanged: the v1 client posts
to `{base_url}/v1/rerank` with the gateway's secret key as a bearer token and parses our answer
(results, and `meta.billed_units`). The SDK is synchronous: it runs in a worker thread."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import cohere
import httpx
import pytest
import trio

from tests.gateway.rerank.support import rerank_rig
from tests.inference import Rig

DOCUMENTS = ["a green field", "apple pie with cream", "red apple pie recipe", "one red car"]


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with rerank_rig(database_url, tmp_path) as r:
        yield r


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    """The SDK's HTTP client, ours so that its connections are closed after the test."""
    with httpx.Client(timeout=10) as client:
        yield client


@pytest.mark.parametrize("model", ["rerank-english-v3.0", "rerank"])
async def test_the_cohere_sdk_reranks_through_the_gateway(
    rig: Rig, http: httpx.Client, model: str
) -> None:
    client = cohere.Client(api_key=rig.key, base_url=rig.gateway.url, httpx_client=http)
    response = await trio.to_thread.run_sync(
        lambda: client.rerank(
            model=model,
            query="red apple pie",
            documents=DOCUMENTS,
            top_n=3,
            return_documents=True,
        )
    )
    assert [r.index for r in response.results] == [2, 1, 3]
    assert [r.relevance_score for r in response.results] == [1.0, 0.666667, 0.333333]
    assert [r.document.text for r in response.results if r.document] == [
        DOCUMENTS[2],
        DOCUMENTS[1],
        DOCUMENTS[3],
    ]
    assert response.meta is not None and response.meta.billed_units is not None
    assert response.meta.billed_units.search_units == 4
    assert response.id


async def test_sdk_errors_carry_our_status(rig: Rig, http: httpx.Client) -> None:
    client = cohere.Client(api_key=rig.key, base_url=rig.gateway.url, httpx_client=http)
    with pytest.raises(cohere.core.api_error.ApiError) as caught:
        await trio.to_thread.run_sync(
            lambda: client.rerank(model="rerank", query="q", documents=[])
        )
    assert caught.value.status_code == 400
