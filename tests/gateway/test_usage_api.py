"""GET /v1/usage over real HTTP against the simulated upstream, on both backends: for every
allowed grouping the sums equal the ledger's usage rows (cost, requests) and what the answers
reported (tokens); failed requests counted as errors; range boundaries; another organization's
usage never visible; bad queries 400 naming the parameter, 401, 403."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.usage.routes import MAX_ROWS
from protocol.credentials import CredentialKind
from protocol.ids import new_id
from protocol.timefmt import now_us, to_iso
from storage.ledger import UsageCharge
from storage.usage import DAY_US, HOUR_US
from tests.inference import Rig, inference_rig, ledger

MESSAGES = [{"role": "user", "content": "hello there"}]
PROVIDER = {"sim/sim-small": "sim", "claude/claude-haiku": "claude", "sim/sim-embed": "sim"}
# Every allowed grouping: any subset of key, model and provider, with day, hour or neither.
GROUPINGS = [
    [*fields, *time]
    for n in range(4)
    for fields in itertools.combinations(("key_id", "model", "provider"), n)
    for time in ([], ["day"], ["hour"])
]


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


async def usage(rig: Rig, query: str = "", key: str | None = None) -> Any:
    return await rig.gateway.client.get(f"/v1/usage{query}", headers=rig.gateway.auth(key))


async def new_key(rig: Rig, **body: Any) -> tuple[str, str]:
    r = await rig.gateway.client.post(
        "/v1/keys", json={"name": new_id("k"), **body}, headers=rig.gateway.auth()
    )
    assert r.status_code in (200, 201), r.text
    return r.json()["key"], r.json()["id"]


def micros(usd: float) -> int:
    return round(usd * 1_000_000)


async def test_every_grouping_sums_to_the_ledger(rig: Rig) -> None:
    other_key, _ = await new_key(rig)
    prompt = completion = 0
    for body, key in (
        ({"model": "small", "messages": MESSAGES, "max_tokens": 7}, None),
        ({"model": "small", "messages": MESSAGES, "stream": True}, None),
        ({"model": "haiku", "messages": MESSAGES}, other_key),
        ({"model": "small", "messages": MESSAGES}, other_key),
    ):
        r = await rig.chat(body, key)
        assert r.status_code == 200, r.text
        if not body.get("stream"):
            prompt += r.json()["usage"]["prompt_tokens"]
            completion += r.json()["usage"]["completion_tokens"]
    r = await rig.gateway.client.post(
        "/v1/embeddings", json={"model": "embed", "input": "hi"}, headers=rig.gateway.auth(rig.key)
    )
    assert r.status_code == 200
    prompt += r.json()["usage"]["prompt_tokens"]
    # Failures, charged nothing: a provider that refuses connections, an upstream 500, a bad body.
    assert (await rig.chat({"model": "gone", "messages": MESSAGES})).status_code == 502
    rig.upstream.behavior.fail_status = 500
    assert (await rig.chat({"model": "small", "messages": MESSAGES}, other_key)).status_code == 502
    rig.upstream.behavior.fail_status = None
    assert (await rig.chat({"model": "small"})).status_code == 400
    _, rows = await ledger(rig, settled=5)
    await rig.gateway.runtime.event_writer.flush()
    assert len(rows) == 5
    spent = -sum(row.amount_micros for row in rows)

    whole = (await usage(rig)).json()
    [total] = whole["data"]
    assert set(total) == {"requests", "input_tokens", "output_tokens", "cost_usd", "errors"}
    assert (total["requests"], total["errors"]) == (8, 3)
    assert micros(total["cost_usd"]) == micros(whole["total_cost_usd"]) == spent
    assert total["output_tokens"] >= completion and total["input_tokens"] >= prompt

    def group_of(row: Any, fields: list[str]) -> tuple[Any, ...]:
        values = {
            "key_id": row.key_id,
            "model": row.model,
            "provider": PROVIDER[row.model],
            "day": (to_iso(row.created_at) or "")[:10],
            "hour": to_iso(row.created_at - row.created_at % HOUR_US),
        }
        return tuple(values[f] for f in fields)

    for fields in GROUPINGS:
        r = await usage(rig, "?group_by=" + ",".join(fields) if fields else "")
        assert r.status_code == 200, (fields, r.text)
        answer = r.json()
        expected: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0])
        for row in rows:
            sums = expected[group_of(row, fields)]
            sums[0] += -row.amount_micros
            sums[1] += 1
        answered = {
            tuple(g[f] for f in fields): [micros(g["cost_usd"]), g["requests"] - g["errors"]]
            for g in answer["data"]
        }  # every failure here was charged nothing: requests - errors are the charged ones
        billed = {group: sums for group, sums in answered.items() if sums != [0, 0]}
        assert billed == dict(expected), fields
        assert micros(answer["total_cost_usd"]) == spent, fields
        assert sum(g["requests"] for g in answer["data"]) == 8, fields
        assert sum(g["errors"] for g in answer["data"]) == 3, fields
        assert sum(g["input_tokens"] for g in answer["data"]) == total["input_tokens"]
        for g in answer["data"]:
            assert set(g) == {*fields, "requests", "input_tokens", "output_tokens", "cost_usd",
                              "errors"}  # fmt: skip
        keys = [
            tuple("" if g[f] is None else g[f] for f in _ordered(fields)) for g in answer["data"]
        ]
        assert keys == sorted(keys), fields  # time first, then key, model, provider

    # The failed requests, by key and model: the bad body never named its model.
    by_model = (await usage(rig, "?group_by=model,provider")).json()["data"]
    failures = {(g["model"], g["provider"]): g["errors"] for g in by_model if g["errors"]}
    assert failures == {("dead/gone", "dead"): 1, ("sim/sim-small", "sim"): 1, (None, None): 1}


def _ordered(fields: list[str]) -> list[str]:
    return [f for f in ("day", "hour", "key_id", "model", "provider") if f in fields]


async def test_range_boundaries_and_other_orgs(rig: Rig) -> None:
    gw = rig.gateway
    storage = gw.runtime.storage
    other = await storage.orgs.create("other")
    credential = gw.runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await storage.orgs.add_management_key(other.id, credential)
    # Three days ago at 13:00 UTC (the defaults are relative to now), and the day after.
    day = now_us() // DAY_US * DAY_US - 3 * DAY_US
    thirteen, next_day = day + 13 * HOUR_US, day + DAY_US
    iso = lambda us: to_iso(us) or ""  # noqa: E731
    d1, d2, d3 = iso(day)[:10], iso(next_day)[:10], iso(next_day + DAY_US)[:10]

    def charge(org_id: str, micros: int, at: int) -> UsageCharge:
        return UsageCharge(
            new_id("txn"), org_id, None, "small", new_id("req"), micros, "chat", at,
            input_tokens=3, output_tokens=4, provider="sim",
        )  # fmt: skip

    await storage.ledger.settle(
        [
            charge(gw.org_id, 1, thirteen - 1),  # 12:59:59.999999
            charge(gw.org_id, 20, thirteen),
            charge(gw.org_id, 300, thirteen + HOUR_US - 1),
            charge(gw.org_id, 4_000, next_day),
            charge(other.id, 50_000, thirteen),
        ]
    )

    async def cost(query: str, key: str | None = None) -> tuple[int, Any]:
        r = await usage(rig, query, key)
        assert r.status_code == 200, r.text
        return micros(r.json()["total_cost_usd"]), r.json()

    spent, answer = await cost(f"?start_date={iso(thirteen)}&end_date={iso(thirteen + HOUR_US)}")
    assert spent == 320
    assert (answer["start_date"], answer["end_date"]) == (iso(thirteen), iso(thirteen + HOUR_US))
    # Whole hours: a start inside an hour rounds down, an end inside one rounds up.
    half_past = iso(thirteen + HOUR_US // 2).removesuffix("Z")  # naive: UTC
    spent, answer = await cost(f"?start_date={half_past}&end_date={iso(thirteen + 1_000_000)}")
    assert spent == 320 and answer["end_date"] == iso(thirteen + HOUR_US)
    assert (await cost(f"?start_date={d1}&end_date={iso(thirteen)}"))[0] == 1
    assert (await cost(f"?start_date={d1}&end_date={d2}"))[0] == 321
    assert (await cost(f"?start_date={d2}&end_date={d2}"))[0] == 0
    _, days = await cost(f"?start_date={d1}&end_date={d3}&group_by=day")
    assert [(g["day"], micros(g["cost_usd"])) for g in days["data"]] == [(d1, 321), (d2, 4_000)]
    _, hours = await cost(f"?start_date={d1}&end_date={d2}&group_by=hour")
    assert [(g["hour"], g["requests"], g["input_tokens"]) for g in hours["data"]] == [
        (iso(thirteen - HOUR_US), 1, 3),
        (iso(thirteen), 2, 6),
    ]
    # Only a start: up to the end of the current hour; only an end: the 30 days before it.
    before = now_us()
    spent, answer = await cost(f"?start_date={d1}")
    ends = {iso(-(-at // HOUR_US) * HOUR_US) for at in (before, now_us())}  # an hour may turn
    assert spent == 4_321 and answer["end_date"] in ends
    _, answer = await cost(f"?end_date={d2}")
    assert answer["start_date"] == iso(next_day - 30 * DAY_US)
    # By default, the last 30 days; each org sees its own usage only.
    assert (await cost("?group_by=key_id,model,provider"))[0] == 4_321
    assert (await cost("", credential.value))[0] == 50_000


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("?group_by=tokens", "group_by"),
        ("?group_by=model,model", "group_by"),
        ("?group_by=day,hour", "group_by"),
        ("?group_by=model,", "group_by"),
        ("?start_date=yesterday", "start_date"),
        ("?end_date=2026-13-01", "end_date"),
        ("?start_date=2026-11-02&end_date=2026-11-01", "end_date"),
        ("?start_date=2025-01-01&end_date=2026-11-01", "end_date"),
        ("?start_date=2026-01-01&end_date=2026-02-01T01:00:00Z&group_by=hour", "group_by"),
    ],
)
async def test_bad_queries_are_400_naming_the_parameter(rig: Rig, query: str, param: str) -> None:
    r = await usage(rig, query)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)


async def test_needs_a_key_with_billing_read(rig: Rig) -> None:
    r = await rig.gateway.client.get("/v1/usage")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    chat_only, _ = await new_key(rig, scopes=["chat:completions"])
    r = await usage(rig, key=chat_only)
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    reader, _ = await new_key(rig, scopes=["billing:read"])
    assert (await usage(rig, key=reader)).status_code == 200
    assert (await usage(rig, key=rig.key)).status_code == 200  # every scope


async def test_an_answer_over_the_row_cap_is_400_asking_to_narrow(rig: Rig) -> None:
    """At most MAX_ROWS groups: one more is refused (not cut short, which would misstate the
    total), exactly MAX_ROWS answered in full."""
    gw = rig.gateway
    keys, hours = 100, 501  # 50,100 groups by key and hour
    assert (hours - 1) * keys == MAX_ROWS
    start = now_us() // DAY_US * DAY_US - 25 * DAY_US
    rows = [
        (gw.org_id, start + h * HOUR_US, f"key_{k:03d}", "m", "p", 1, 2, 3, 4, 0)
        for h in range(hours)
        for k in range(keys)
    ]
    columns = ("org_id", "hour", "key_id", "model", "provider", "requests", "input_tokens",
               "output_tokens", "cost_micros", "errors")  # fmt: skip
    async with gw.runtime.storage.db.transaction() as tx:
        await tx.insert_many("usage_hourly", columns, rows)
    iso = lambda us: to_iso(us) or ""  # noqa: E731
    query = f"?start_date={iso(start)}&group_by=key_id,hour&end_date="
    r = await usage(rig, query + iso(start + hours * HOUR_US))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "group_by")
    assert "50,000" in error["message"] and "narrow the range" in error["message"]
    r = await usage(rig, query + iso(start + (hours - 1) * HOUR_US))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert len(answer["data"]) == MAX_ROWS
    assert micros(answer["total_cost_usd"]) == 4 * MAX_ROWS
    assert answer["data"][-1] == {
        "key_id": "key_099", "hour": iso(start + (hours - 2) * HOUR_US), "requests": 1,
        "input_tokens": 2, "output_tokens": 3, "cost_usd": 0.000004, "errors": 0,
    }  # fmt: skip
