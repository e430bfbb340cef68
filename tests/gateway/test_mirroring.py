"""Traffic mirroring end to end, against the simulated upstream over real HTTP: a request
answered by the gateway is offered to the mirror area as the inference routes do, and the
shadow calls leave rows with both sides' figures (answers sealed), charge the organization
only when `billed`, show in GET /v1/admin/mirrors and /metrics; a failing or slow shadow
costs nothing to anything else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from bench.upstream.faults import Faults
from gateway.inference.billing import pricing_for, provider_cost
from gateway.mirror.area import MirrorArea
from protocol.secretbox import MIRROR_ANSWERS, SecretBox
from protocol.usage import Usage
from services.mirror import MirrorRoute, open_answer
from storage.mirror_results import MirrorResult
from tests.harness import OPERATOR_KEY
from tests.inference import Rig, inference_rig, ledger
from tests.metrics_lint import lint, value
from tests.waiting import wait_until

pytestmark = pytest.mark.storage

SHADOW_PRICE_IN = Decimal("2")
SHADOW_PRICE_OUT = Decimal("4")

MIRRORS_TOML = f"""
[[models]]
id = "mirrored"
provider = "sim"
upstream = "sim-mirrored"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5

[[models.mirrors]]
model = "haiku"
sample_rate = 1.0

[[models.mirrors]]
model = "shadow-openai"
sample_rate = 1.0

[[models]]
id = "shadow-openai"
provider = "sim"
upstream = "sim-shadow"
input_usd_per_mtok = {SHADOW_PRICE_IN}
output_usd_per_mtok = {SHADOW_PRICE_OUT}

[[models]]
id = "mirrored-billed"
provider = "sim"
upstream = "sim-mirrored-billed"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5

[[models.mirrors]]
model = "shadow-billed"
sample_rate = 1.0
billed = true

[[models]]
id = "shadow-billed"
provider = "sim"
upstream = "sim-shadow-billed"
input_usd_per_mtok = {SHADOW_PRICE_IN}
output_usd_per_mtok = {SHADOW_PRICE_OUT}

[[models]]
id = "mirrored-embed"
provider = "sim"
upstream = "sim-embed-a"
input_usd_per_mtok = 0.02

[[models.mirrors]]
model = "shadow-embed"
sample_rate = 1.0

[[models]]
id = "shadow-embed"
provider = "sim"
upstream = "sim-embed-b"
input_usd_per_mtok = 0.1

[[models]]
id = "mirrored-slow"
provider = "sim"
upstream = "sim-mirrored-slow"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5

[[models.mirrors]]
model = "shadow-slow"
sample_rate = 1.0

[[models]]
id = "mirrored-fast"
provider = "sim"
upstream = "sim-mirrored-fast"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5

[[models.mirrors]]
model = "shadow-fast"
sample_rate = 1.0

[[models]]
id = "shadow-slow"
provider = "sim"
upstream = "sim-shadow-slow"
input_usd_per_mtok = 1
output_usd_per_mtok = 1

[[models]]
id = "shadow-fast"
provider = "sim"
upstream = "sim-shadow-fast"
input_usd_per_mtok = 1
output_usd_per_mtok = 1
"""

MESSAGES = [{"role": "user", "content": "a private question about the weather"}]


@asynccontextmanager
async def mirror_rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path, extra_toml=MIRRORS_TOML) as rig:
        yield rig


def _area(rig: Rig) -> MirrorArea:
    return rig.gateway.runtime.area(MirrorArea)


async def _mirror(
    rig: Rig,
    route: MirrorRoute,
    path: str,
    body: dict[str, Any],
    *,
    expected: int,
) -> tuple[httpx.Response, list[MirrorResult]]:
    """Send `body` to `path` (the route offers it to its model's mirrors once answered: the
    mirror plugin, gateway/plugins/mirroring.py); the rows its `expected` shadow calls left."""
    area = _area(rig)
    mirror = area.mirror
    assert mirror is not None
    calls_before = sum(mirror.calls.values())
    response = await rig.gateway.client.post(
        path,
        content=msgspec.json.encode(body),
        headers={**rig.gateway.auth(rig.key), "content-type": "application/json"},
    )
    assert response.status_code == 200, response.text
    await wait_until(lambda: sum(mirror.calls.values()) >= calls_before + expected)
    await mirror.flush()
    return response, await area.results.for_request(response.headers["x-request-id"])


def _box(rig: Rig) -> SecretBox:
    return rig.gateway.runtime.box(MIRROR_ANSWERS)


async def test_a_chat_request_is_mirrored_with_both_sides_figures(
    database_url: str, tmp_path: Path
) -> None:
    async with mirror_rig(database_url, tmp_path) as rig:
        before = len(rig.upstream.requests)
        response, rows = await _mirror(
            rig,
            "chat",
            "/v1/chat/completions",
            {"model": "mirrored", "messages": MESSAGES},
            expected=2,
        )
        primary = response.json()["usage"]
        by_shadow = {row.shadow: row for row in rows}
        assert set(by_shadow) == {"haiku", "shadow-openai"}
        for row in rows:
            assert (row.outcome, row.route, row.model, row.org_id) == (
                "ok",
                "chat",
                "mirrored",
                rig.gateway.org_id,
            )
            assert row.primary_latency_ms > 0 and row.primary_cost_usd > 0
            assert row.primary_prompt_tokens == primary["prompt_tokens"]
            assert row.primary_completion_tokens == primary["completion_tokens"]
            assert row.shadow_latency_ms > 0
            assert row.answers_equal is True  # the simulated models say the same words
            assert row.billed is False
        openai = by_shadow["shadow-openai"]
        # The simulator counts the words and 3 per message; 20 words of answer.
        assert (openai.shadow_prompt_tokens, openai.shadow_completion_tokens) == (9, 20)
        price = rig.gateway.runtime.registry.resolve("shadow-openai").price
        assert price is not None
        expected = provider_cost(price, Usage(prompt_tokens=9, completion_tokens=20))
        assert openai.shadow_cost_usd == pytest.approx(float(expected))
        # What the shadows were sent: the upstream names, as JSON, Anthropic's in its format.
        sent = {r.path: r.json() for r in rig.upstream.requests[before + 1 :]}
        assert sent["/v1/chat/completions"]["model"] == "sim-shadow"
        assert sent["/v1/chat/completions"]["stream"] is False
        assert sent["/v1/messages"]["model"] == "claude-haiku"
        # The answers are sealed: no text in any column of the stored rows.
        stored = await rig.gateway.runtime.storage.db.fetch("SELECT * FROM mirror_results")
        assert len(stored) == 2
        assert "tok0" not in repr(stored) and "weather" not in repr(stored)
        opened = open_answer(_box(rig), openai)
        assert opened is not None and b"tok0 tok1" in opened


async def test_a_streamed_request_is_asked_as_json_and_compared_by_figures(
    database_url: str, tmp_path: Path
) -> None:
    async with mirror_rig(database_url, tmp_path) as rig:
        before = len(rig.upstream.requests)
        body = {
            "model": "mirrored",
            "messages": MESSAGES,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        _, rows = await _mirror(rig, "chat", "/v1/chat/completions", body, expected=2)
        assert {(r.outcome, r.answers_equal) for r in rows} == {("ok", None)}
        assert all(r.shadow_answer_sealed is not None for r in rows)
        shadow = next(
            r for r in rig.upstream.requests[before:] if r.json()["model"] == "sim-shadow"
        )
        assert shadow.json()["stream"] is False and "stream_options" not in shadow.json()


async def test_a_failing_shadow_is_recorded_as_its_error(database_url: str, tmp_path: Path) -> None:
    async with mirror_rig(database_url, tmp_path) as rig:
        rig.upstream.behavior.faults = {"sim-shadow": Faults(error_rate=1.0, error_status=503)}
        _, rows = await _mirror(
            rig,
            "chat",
            "/v1/chat/completions",
            {"model": "mirrored", "messages": MESSAGES},
            expected=2,
        )
        failed = next(r for r in rows if r.shadow == "shadow-openai")
        assert (failed.outcome, failed.answers_equal, failed.shadow_answer_sealed) == (
            "http_503",
            None,
            None,
        )
        assert (failed.shadow_prompt_tokens, failed.shadow_cost_usd) == (0, 0.0)
        mirror = _area(rig).mirror
        assert mirror is not None
        assert mirror.calls["mirrored", "shadow-openai", "http_503"] == 1
        assert mirror.calls["mirrored", "haiku", "ok"] == 1


async def test_only_a_billed_mirror_charges_the_organization(
    database_url: str, tmp_path: Path
) -> None:
    async with mirror_rig(database_url, tmp_path) as rig:
        await _mirror(
            rig,
            "chat",
            "/v1/chat/completions",
            {"model": "mirrored", "messages": MESSAGES},
            expected=2,
        )
        _, rows = await ledger(rig, settled=1)
        assert [r.description for r in rows] == ["Chat completions: sim/sim-mirrored"]
        _, billed = await _mirror(
            rig,
            "chat",
            "/v1/chat/completions",
            {"model": "mirrored-billed", "messages": MESSAGES},
            expected=1,
        )
        _, rows = await ledger(rig, settled=3)
        mirror_rows = [r for r in rows if r.description.startswith("Mirror")]
        assert len(rows) == 3 and len(mirror_rows) == 1
        (charged,) = mirror_rows
        (row,) = billed
        assert charged.description == "Mirror of mirrored-billed (chat): shadow-billed"
        assert (charged.model, charged.request_id, charged.key_id) == (
            "shadow-billed",
            row.request_id,
            None,
        )
        plan = await rig.gateway.runtime.accountant.plan_of(rig.gateway.org_id)
        price = rig.gateway.runtime.registry.resolve("shadow-billed").price
        assert price is not None
        micros = pricing_for(price, plan).charge(
            row.shadow_prompt_tokens, row.shadow_completion_tokens
        )
        assert charged.amount_micros == -micros and micros > 0
        assert row.billed is True


async def test_embeddings_and_responses_are_mirrored(database_url: str, tmp_path: Path) -> None:
    async with mirror_rig(database_url, tmp_path) as rig:
        _, rows = await _mirror(
            rig,
            "embeddings",
            "/v1/embeddings",
            {"model": "mirrored-embed", "input": ["one two three", "four"]},
            expected=1,
        )
        (row,) = rows
        assert (row.outcome, row.shadow, row.shadow_prompt_tokens) == ("ok", "shadow-embed", 4)
        assert row.answers_equal is True  # the simulator's vectors depend on the text only
        _, rows = await _mirror(
            rig,
            "responses",
            "/v1/responses",
            {"model": "mirrored", "input": "a private question", "store": False},
            expected=2,
        )
        assert {(r.outcome, r.answers_equal) for r in rows} == {("ok", True)}
        # A continuation needs the stored chain: not mirrored (counted as skipped, no row).
        first = await rig.gateway.client.post(
            "/v1/responses",
            json={"model": "small", "input": "hello"},
            headers=rig.gateway.auth(rig.key),
        )
        _, rows = await _mirror(
            rig,
            "responses",
            "/v1/responses",
            {"model": "mirrored", "input": "more", "previous_response_id": first.json()["id"]},
            expected=2,
        )
        assert rows == []
        mirror = _area(rig).mirror
        assert mirror is not None
        assert mirror.calls["mirrored", "haiku", "skipped"] == 1


async def test_a_slow_shadow_delays_nothing_beyond_the_worker_bound(
    database_url: str, tmp_path: Path
) -> None:
    async with mirror_rig(database_url, tmp_path) as rig:
        mirror = _area(rig).mirror
        assert mirror is not None
        workers = int(str(mirror.statistics()["workers"]))
        # The slow shadow never answers (until the gateway gives up, at read_timeout_s): it
        # holds all workers but one.
        rig.upstream.behavior.faults = {"sim-shadow-slow": Faults(stall=True)}
        for _ in range(workers - 1):
            await _offer_only(rig, "mirrored-slow")
        await wait_until(lambda: mirror.in_flight == workers - 1)
        for _ in range(3):
            _, rows = await _mirror(
                rig,
                "chat",
                "/v1/chat/completions",
                {"model": "mirrored-fast", "messages": MESSAGES},
                expected=1,
            )
            assert [r.outcome for r in rows] == ["ok"]
        assert mirror.in_flight == workers - 1  # the slow ones still wait


async def _offer_only(rig: Rig, model: str) -> None:
    """A request of `model` answered (and so offered), without waiting for its shadow call."""
    response = await rig.chat({"model": model, "messages": MESSAGES})
    assert response.status_code == 200


async def test_the_admin_route_compares_each_pair(database_url: str, tmp_path: Path) -> None:
    async with mirror_rig(database_url, tmp_path) as rig:
        rig.upstream.behavior.faults = {"sim-shadow": Faults(error_rate=1.0, every=2)}
        for _ in range(4):
            await _mirror(
                rig,
                "chat",
                "/v1/chat/completions",
                {"model": "mirrored", "messages": MESSAGES},
                expected=2,
            )
        client = rig.gateway.client
        operator = {"Authorization": f"Bearer {OPERATOR_KEY}"}
        answer = await client.get("/v1/admin/mirrors", headers=operator)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["since"] is None
        pairs = {(p["model"], p["shadow"]): p for p in body["pairs"]}
        assert set(pairs) == {("mirrored", "haiku"), ("mirrored", "shadow-openai")}
        openai = pairs["mirrored", "shadow-openai"]
        assert (openai["requests"], openai["errors"]) == (4, 2)
        assert openai["outcomes"] == {"http_500": 2, "ok": 2}
        assert (openai["compared"], openai["equal_share"]) == (2, 1.0)
        primary, shadow = openai["figures"]["primary"], openai["figures"]["shadow"]
        assert (primary["calls"], shadow["calls"]) == (4, 2)
        assert primary["latency_ms_p95"] >= primary["latency_ms_p50"] > 0
        assert primary["cost_usd"] > 0  # what the four requests were charged
        assert (shadow["mean_prompt_tokens"], shadow["mean_completion_tokens"]) == (9.0, 20.0)
        assert shadow["cost_usd"] == pytest.approx(
            2 * float((9 * SHADOW_PRICE_IN + 20 * SHADOW_PRICE_OUT) / 1_000_000)
        )
        assert shadow["latency_ms_p95"] >= shadow["latency_ms_p50"] > 0
        haiku = pairs["mirrored", "haiku"]
        assert (haiku["requests"], haiku["errors"], haiku["equal_share"]) == (4, 0, 1.0)
        later = await client.get("/v1/admin/mirrors?since=2999-01-01", headers=operator)
        assert later.json() == {"since": "2999-01-01T00:00:00Z", "pairs": []}
        bad = await client.get("/v1/admin/mirrors?since=yesterday", headers=operator)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "since"
        refused = await client.get("/v1/admin/mirrors", headers=rig.gateway.auth())
        assert refused.status_code == 403
        families = lint((await client.get("/metrics")).text)
        calls, dropped = families["gateway_mirror_calls"], families["gateway_mirror_dropped"]
        assert calls.type == dropped.type == "counter"  # running totals
        pair = {"model": "mirrored", "shadow": "shadow-openai"}
        assert value(calls, "gateway_mirror_calls_total", outcome="http_500", **pair) == 2
        assert value(dropped, "gateway_mirror_dropped_total", stage="inbox") == 0
        assert families["gateway_mirror_in_flight"].type == "gauge"


async def test_without_mirrors_there_is_no_actor_and_the_route_answers_empty(
    database_url: str, tmp_path: Path
) -> None:
    async with inference_rig(database_url, tmp_path) as rig:
        area = _area(rig)
        assert area.mirror is None
        assert (
            area.offer_mirrors(
                org_id=rig.gateway.org_id,
                key_id=None,
                request_id="req_1",
                route="chat",
                model="small",
                body=b"{}",
                latency_ms=1.0,
                prompt_tokens=1,
                completion_tokens=1,
                cost_usd=0.0,
                answer=None,
            )
            == 0
        )
        names = {a.name for a in rig.gateway.runtime.supervisor.children()}
        assert not names & {"mirror", "mirror-results", "mirror-retention"}
        answer = await rig.gateway.client.get(
            "/v1/admin/mirrors", headers={"Authorization": f"Bearer {OPERATOR_KEY}"}
        )
        assert answer.json() == {"since": None, "pairs": []}
