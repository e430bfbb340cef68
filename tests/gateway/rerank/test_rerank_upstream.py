"""A rerank's upstream failing or answering hostile bytes, through both adapters: malformed
answers (bad index, repeated index, NaN, not JSON, too many results) are 502
`upstream_bad_response`, never a crash; provider errors map as for chat (429 with Cohere's
`{"message"}` body read, 5xx → 502, refused credentials → 502, slow → 504); every failure is
one `completion.error` event naming the endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.gateway.keys_client import error_of
from tests.gateway.rerank.support import HOSTILE, rerank, rerank_rig
from tests.inference import UPSTREAM_KEY, Rig

DOCUMENTS = ["apple", "pear", "apple pie"]
MODELS = ("rerank", "rerank-english-v3.0")


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with rerank_rig(database_url, tmp_path) as r:
        yield r


def body(model: str) -> dict[str, object]:
    return {"model": model, "query": "apple", "documents": DOCUMENTS}


@pytest.mark.parametrize("provider", ["sim", "co"])
@pytest.mark.parametrize("hostile", HOSTILE)
async def test_hostile_answers_are_502(rig: Rig, provider: str, hostile: str) -> None:
    r = await rerank(rig, body(f"{provider}-{hostile}"))
    assert r.status_code == 502, r.text
    error = error_of(r)
    assert error["code"] == "upstream_bad_response" and error["type"] == "upstream_error"
    assert (await rerank(rig, body("rerank"))).status_code == 200  # still serving


@pytest.mark.parametrize("model", MODELS)
async def test_upstream_rate_limit_is_429_with_the_providers_message(rig: Rig, model: str) -> None:
    rig.upstream.behavior.fail_status = 429
    rig.upstream.behavior.retry_after = "7"
    r = await rerank(rig, body(model))
    assert r.status_code == 429
    error = error_of(r)
    assert error["code"] == "upstream_rate_limited"
    assert "simulated upstream failure (429)" in error["message"]  # Cohere's {"message"} read
    assert r.headers["retry-after"] == "7"


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(
    ("status", "answered", "code"),
    [
        (500, 502, "upstream_error"),
        (503, 502, "upstream_error"),
        (401, 502, "upstream_auth_failed"),
        (400, 400, "upstream_400"),
        (408, 504, "upstream_timeout"),
    ],
)
async def test_upstream_errors_map_as_for_chat(
    rig: Rig, model: str, status: int, answered: int, code: str
) -> None:
    rig.upstream.behavior.fail_status = status
    r = await rerank(rig, body(model))
    assert r.status_code == answered
    assert error_of(r)["code"] == code


async def test_cohere_is_sent_the_providers_key_as_bearer(rig: Rig) -> None:
    assert (await rerank(rig, body("rerank-english-v3.0"))).status_code == 200
    (sent,) = [q for q in rig.upstream.requests if q.path == "/cohere/v1/rerank"]
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


async def test_a_slow_upstream_is_504(database_url: str, tmp_path: Path) -> None:
    async with rerank_rig(database_url, tmp_path, read_timeout_s=0.2) as rig:
        rig.upstream.behavior.hang = True
        for model in MODELS:
            r = await rerank(rig, body(model))
            assert r.status_code == 504
            assert error_of(r)["code"] == "upstream_timeout"


async def test_failures_are_completion_error_events(rig: Rig) -> None:
    rig.upstream.behavior.fail_status = 500
    failed = await rerank(rig, body("rerank-english-v3.0"))
    rig.upstream.behavior.fail_status = None
    refused = await rerank(rig, {**body("rerank"), "documents": []})
    await rig.gateway.runtime.event_writer.flush()
    stored = await rig.gateway.runtime.storage.events.list_for_org(rig.gateway.org_id)
    events = sorted(
        (e.data for e in stored if e.type == "completion.error"), key=lambda d: d["status"]
    )
    assert [(d["status"], d["endpoint"], d["model"], d["request_id"]) for d in events] == [
        (400, "/v1/rerank", "sim/sim-rerank", refused.headers["x-request-id"]),
        (502, "/v1/rerank", "co/rerank-english-v3.0", failed.headers["x-request-id"]),
    ]
    assert events[1]["error"]["code"] == "upstream_error"
