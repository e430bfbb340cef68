"""Two real `gateway serve` processes sharing the database and Redis: 200 concurrent requests
on a key whose daily budget covers 50 admit at most 50, and afterwards the balance equals the
sum of the ledger's rows to the micro-dollar (read back through the API)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from bench.upstream import serve_upstream
from tests.backends import REDIS_URL
from tests.gateway.test_cli import BOOTSTRAP, _env, _gateway, _start, _stop
from tests.inference import inference_toml

pytestmark = pytest.mark.skipif(REDIS_URL is None, reason="needs GATEWAY_TEST_REDIS_URL")

BODY = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
MGMT = {"Authorization": f"Bearer {BOOTSTRAP}"}


async def all_rows(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while True:
        page = (
            await client.get(f"/v1/credits/transactions?limit=200&offset={len(rows)}", headers=MGMT)
        ).json()
        rows += page["data"]
        if not page["has_more"]:
            return rows


async def usage_rows(client: httpx.AsyncClient, count: int) -> list[dict[str, Any]]:
    """The usage rows, once `count` of them were written (flushes run every 50 ms)."""
    with trio.fail_after(10):
        while True:
            rows = [r for r in await all_rows(client) if r["type"] == "usage"]
            if len(rows) >= count:
                return rows
            await trio.sleep(0.05)


async def test_budget_and_balance_hold_across_two_processes(
    database_url: str, tmp_path: Path
) -> None:
    assert REDIS_URL is not None
    master = base64.b64encode(os.urandom(32)).decode()
    async with trio.open_nursery() as nursery:
        upstream = await nursery.start(serve_upstream)
        config = tmp_path / "gateway.toml"
        config.write_text(inference_toml(upstream.url))
        processes = []
        urls = []
        for name in ("a", "b"):
            env = _env(
                tmp_path / name,
                GATEWAY_DATABASE_URL=database_url,
                GATEWAY_REDIS_URL=REDIS_URL,
                GATEWAY_MASTER_KEY=master,
                GATEWAY_CONFIG=str(config),
                GATEWAY_LOG_LEVEL="WARNING",
            )
            (tmp_path / name).mkdir()
            process, url = await _start(_gateway("serve"), env, tmp_path / name)
            processes.append(process)
            urls.append(url)
        try:
            async with (
                httpx.AsyncClient(base_url=urls[0], timeout=30) as a,
                httpx.AsyncClient(base_url=urls[1], timeout=30) as b,
            ):
                r = await a.post("/v1/credits/topup", json={"amount_usd": 100}, headers=MGMT)
                assert r.status_code == 200, r.text
                assert (await b.post("/v1/chat/completions", json=BODY, headers=MGMT)).is_success
                charge = -(await usage_rows(a, 1))[0]["amount_usd"]
                cap = round(50 * charge, 6)
                r = await a.post(
                    "/v1/keys", json={"name": "capped", "daily_budget_usd": cap}, headers=MGMT
                )
                key = r.json()["key"]
                statuses: list[tuple[int, str]] = []

                async def one(client: httpx.AsyncClient) -> None:
                    r = await client.post(
                        "/v1/chat/completions",
                        json=BODY,
                        headers={"Authorization": f"Bearer {key}"},
                    )
                    code = "" if r.is_success else r.json()["error"]["code"]
                    statuses.append((r.status_code, code))

                async with trio.open_nursery() as burst:
                    for i in range(200):
                        burst.start_soon(one, (a, b)[i % 2])
                admitted = sum(1 for status, _ in statuses if status == 200)
                assert 0 < admitted <= 50
                assert {c for s, c in statuses if s != 200} == {"budget_exceeded"}
                await usage_rows(a, admitted + 1)
                rows = await all_rows(b)
                credits = (await b.get("/v1/credits", headers=MGMT)).json()
                micros = [round(r["amount_usd"] * 1_000_000) for r in rows]
                assert round(credits["balance_usd"] * 1_000_000) == sum(micros)
                assert sum(1 for r in rows if r["type"] == "usage") == admitted + 1
                spent = -sum(m for r, m in zip(rows, micros, strict=True) if r["type"] == "usage")
                assert spent <= round(cap * 1_000_000) + round(charge * 1_000_000)
        finally:
            for process in processes:
                assert await _stop(process) == 0
        nursery.cancel_scope.cancel()
