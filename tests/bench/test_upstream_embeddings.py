"""The simulated upstream's embeddings (bench/upstream/embedding.py and the /v1/embeddings
route): deterministic unit vectors whose similarity follows the wording, of the `dimensions`
asked for, as floats or base64 as OpenAI sends them."""

from __future__ import annotations

import array
import base64
import math
import sys

import httpx
import pytest
import trio

from bench.upstream import UpstreamServer, serve_upstream
from bench.upstream.embedding import DEFAULT_DIMENSIONS, embed, words


def similarity(a: str, b: str) -> float:
    return sum(x * y for x, y in zip(embed(a), embed(b), strict=True))


def test_same_text_same_unit_vector() -> None:
    v = embed("How do I reset my password?")
    assert v == embed("How do I reset my password?") and len(v) == DEFAULT_DIMENSIONS
    assert math.fsum(x * x for x in v) == pytest.approx(1.0, abs=1e-5)
    assert len(embed("hello", 12)) == 12
    for wordless in ("?!", "", "🙂"):  # no words: still a unit vector, never zeros
        assert math.fsum(x * x for x in embed(wordless, 8)) == pytest.approx(1.0, abs=1e-5)
    assert embed("?!") != embed("!?")


def test_similarity_follows_the_wording() -> None:
    base = "How do I reset my password?"
    paraphrase = similarity(base, "how can I reset my password")
    other_object = similarity(base, "How do I reset my router?")
    unrelated = similarity(base, "What is the boiling point of water?")
    assert paraphrase > 0.85 and other_object < 0.6 and unrelated < 0.2
    # word order counts a little
    assert similarity("5 miles to km", "5 km to miles") < 0.95


def test_words_are_folded_expanded_and_stemmed() -> None:
    assert words("Don't RESET passwords! What's resetting?") == [
        "do",
        "not",
        "reset",
        "password",
        "what",
        "reset",
    ]
    assert words("I can't, won't") == ["i", "can", "not", "will", "not"]


@pytest.fixture
async def client(nursery: trio.Nursery) -> httpx.AsyncClient:
    upstream: UpstreamServer = await nursery.start(serve_upstream)
    return httpx.AsyncClient(base_url=upstream.url, headers={"authorization": "Bearer k"})


async def test_the_route_honours_dimensions_and_base64(client: httpx.AsyncClient) -> None:
    async with client:
        asked = {"model": "e", "input": ["reset my password", "x"], "dimensions": 64}
        body = (await client.post("/v1/embeddings", json=asked)).json()
        assert [len(d["embedding"]) for d in body["data"]] == [64, 64]
        assert body["data"][0]["embedding"] == pytest.approx(embed("reset my password", 64))
        assert body["usage"] == {"prompt_tokens": 4, "total_tokens": 4}

        asked["encoding_format"] = "base64"
        packed = (await client.post("/v1/embeddings", json=asked)).json()["data"][0]["embedding"]
        floats = array.array("f", base64.b64decode(packed))
        if sys.byteorder == "big":
            floats.byteswap()
        assert list(floats) == pytest.approx(embed("reset my password", 64), abs=1e-6)

        for bad in (0, 5000):
            r = await client.post(
                "/v1/embeddings", json={"model": "e", "input": "x", "dimensions": bad}
            )
            assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions"
        r = await client.post(
            "/v1/embeddings", json={"model": "e", "input": "x", "encoding_format": "int8"}
        )
        assert r.status_code == 400
