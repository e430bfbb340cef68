"""Who may create responses and what it costs, over real HTTP: 401, 403 (scope, allowed
models), 404 unknown model, 400 bad bodies (hostile ones included), 402 without credit, 429
rate limit, upstream failures (nothing stored or charged), exact billing with a usage row per
response, and `completion.*` events."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from protocol.billing import charge_micros
from tests.gateway.keys_client import create_key
from tests.gateway.responses_rig import create, error_of, get
from tests.inference import PRICE_IN, PRICE_OUT, Rig, inference_rig, ledger

CREDIT = 100_000_000  # the rig's top-up, micro-USD


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


def expected_charge(usage: dict[str, int]) -> int:
    cost = (usage["input_tokens"] * PRICE_IN + usage["output_tokens"] * PRICE_OUT) / 10**6
    return charge_micros(cost, Decimal(4))


async def test_authentication_scope_and_allowed_models(rig: Rig) -> None:
    body = {"model": "small", "input": "x"}
    r = await rig.gateway.client.post("/v1/responses", json=body)
    assert r.status_code == 401
    chat_only = (await create_key(rig.gateway, name="c", scopes=["chat:completions"]))["key"]
    assert (await create(rig, body, key=chat_only)).status_code == 403
    assert (await get(rig, "/v1/responses/resp_x", key=chat_only)).status_code == 403
    scoped = (await create_key(rig.gateway, name="r", scopes=["responses"]))["key"]
    assert (await create(rig, body, key=scoped)).status_code == 200
    only_haiku = (await create_key(rig.gateway, name="h", allowed_models=["haiku"]))["key"]
    r = await create(rig, body, key=only_haiku)
    assert r.status_code == 403 and error_of(r)["code"] == "model_not_allowed"
    r = await create(rig, {"model": "nope", "input": "x"})
    assert r.status_code == 404
    assert len(rig.upstream.requests) == 1


async def test_rate_limit_is_429(rig: Rig) -> None:
    key = (await create_key(rig.gateway, name="slow", rate_limit_rpm=1))["key"]
    assert (await create(rig, {"model": "small", "input": "x"}, key=key)).status_code == 200
    r = await create(rig, {"model": "small", "input": "x"}, key=key)
    assert r.status_code == 429 and error_of(r)["type"] == "rate_limit_error"


async def test_without_credit_402_and_nothing_reaches_the_upstream(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path, credit_usd=None) as rig:
        for stream in (False, True):
            r = await create(rig, {"model": "small", "input": "x", "stream": stream})
            assert r.status_code == 402 and error_of(r)["code"] == "insufficient_credits"
        assert rig.upstream.requests == []
        assert await rig.gateway.runtime.storage.responses.count() == 0


@pytest.mark.parametrize("model", ["small", "haiku"])
async def test_each_response_is_charged_exactly_with_a_usage_row(rig: Rig, model: str) -> None:
    first = await create(rig, {"model": model, "input": "hello there", "max_output_tokens": 7})
    second = await create(
        rig,
        {"model": model, "input": "again", "previous_response_id": first.json()["id"]},
    )
    charges = [expected_charge(r.json()["usage"]) for r in (first, second)]
    balance, rows = await ledger(rig, settled=2)
    assert balance == CREDIT - sum(charges)
    assert sorted(-row.amount_micros for row in rows) == sorted(charges)
    canonical = {"small": "sim/sim-small", "haiku": "claude/claude-haiku"}[model]
    assert {row.model for row in rows} == {canonical}
    assert {row.request_id for row in rows} == {
        first.headers["x-request-id"],
        second.headers["x-request-id"],
    }
    assert {row.description for row in rows} == {f"Responses: {canonical}"}


async def test_an_upstream_failure_is_not_stored_nor_charged(rig: Rig) -> None:
    rig.upstream.behavior.fail_status = 500
    r = await create(rig, {"model": "small", "input": "x"})
    assert r.status_code == 502 and error_of(r)["type"] == "upstream_error"
    rig.upstream.behavior.fail_status = 429
    assert (await create(rig, {"model": "haiku", "input": "x"})).status_code == 429
    balance, rows = await ledger(rig)
    assert (balance, rows) == (CREDIT, [])
    assert await rig.gateway.runtime.storage.responses.count() == 0


async def test_errors_and_successes_are_completion_events(
    database_url: str, tmp_path: Path
) -> None:
    toml = "\n[webhooks]\ncompletion_success_sample_rate = 1.0\n"
    async with inference_rig(database_url, tmp_path, extra_toml=toml) as rig:
        await create(rig, {"model": "small", "input": "x", "tools": [{"type": "web_search"}]})
        ok = await create(rig, {"model": "small", "input": "x", "max_output_tokens": 3})
        await rig.gateway.runtime.accountant.flush()  # a billed request's event: with its charge
        await rig.gateway.runtime.event_writer.flush()
        stored = await rig.gateway.runtime.storage.events.list_for_org(
            rig.gateway.org_id, limit=100
        )
        events = {e.type: e.data for e in stored if e.type.startswith("completion.")}
        error = events["completion.error"]
        assert error["endpoint"] == "/v1/responses" and error["status"] == 400
        assert error["error"]["code"] == "unsupported_tool"
        success = events["completion.success"]
        assert success["endpoint"] == "/v1/responses" and success["model"] == "sim/sim-small"
        assert success["request_id"] == ok.headers["x-request-id"]
        assert success["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "small", "input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
        ({"model": "small", "input": [{"type": "computer_call"}]}, "input[0].type"),
        ({"model": "small", "input": {"role": "user"}}, "input"),
        ({"model": "small", "input": "x", "temperature": "warm"}, "temperature"),
        ({"model": "small", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        (
            {"model": "small", "input": "x", "tools": [{"type": "code_interpreter"}]},
            "tools[0].type",
        ),
        ({"model": "small", "input": "x", "tools": [{"type": "file_search"}]}, "tools[0].type"),
        (
            {"model": "small", "input": "x", "tools": [{"type": "computer_use_preview"}]},
            "tools[0].type",
        ),
        ({"model": 5, "input": "x"}, "model"),
        ({"model": "small", "input": [{"role": "user", "content": 5}]}, "input[0].content"),
    ],
)
async def test_bad_bodies_are_400_naming_the_param(
    rig: Rig, body: dict[str, Any], param: str
) -> None:
    r = await create(rig, body)
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == param
    assert rig.upstream.requests == []


async def test_hostile_bodies_never_reach_the_upstream_and_the_gateway_keeps_serving(
    rig: Rig,
) -> None:
    headers = {**rig.gateway.auth(rig.key), "content-type": "application/json"}
    client = rig.gateway.client
    deep = b'{"model": "small", "input": [{"role": "user", "content": ' + b"[" * 50_000
    r = await client.post("/v1/responses", content=deep + b"]" * 50_000 + b"}]}", headers=headers)
    assert r.status_code == 400
    many = {"model": "small", "input": [{"role": "user", "content": "x"}] * 1001}
    assert (await create(rig, many)).status_code == 400
    for raw in (b"", b"null", b"[]", b"{", b'{"model": "small", "input": "x"}' * 2, b"\xff"):
        r = await client.post("/v1/responses", content=raw, headers=headers)
        assert r.status_code == 400, raw
    huge = {"model": "small", "input": "x" * (64 * 1024 * 1024)}
    r = await create(rig, huge)
    assert r.status_code in (400, 413)
    assert rig.upstream.requests == []
    assert (await create(rig, {"model": "small", "input": "fine"})).status_code == 200
