"""A Redis outage under two gateway instances sharing PostgreSQL (or one SQLite file) and
Redis, Redis reached through a TCP forwarder the test cuts: what an instance admitted on its
own view during the outage reaches Redis once it is back, so a key's daily budget still holds
and Redis's copy of the balance and key spend equals the database's right after recovery."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import coredis
import pytest
import trio

from protocol.billing import day_of
from protocol.timefmt import now_us
from tests.backends import REDIS_URL
from tests.harness import Gateway
from tests.inference import two_instances
from tests.tcp_forwarder import forwarding
from tests.waiting import wait_until, wait_until_async

pytestmark = pytest.mark.skipif(REDIS_URL is None, reason="needs GATEWAY_TEST_REDIS_URL")

BODY = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}


async def chat(gw: Gateway, key: str) -> tuple[int, str]:
    r = await gw.client.post("/v1/chat/completions", json=BODY, headers=gw.auth(key))
    return r.status_code, "" if r.status_code == 200 else r.json()["error"]["code"]


async def flushed(a: Gateway, b: Gateway) -> None:
    for gw in (a, b):
        await gw.runtime.accountant.flush()


async def test_a_budget_holds_across_a_redis_outage(database_url: str, tmp_path: Path) -> None:
    assert REDIS_URL is not None
    url = urlsplit(REDIS_URL)
    async with (
        coredis.Redis.from_url(REDIS_URL) as redis,
        forwarding(url.hostname or "127.0.0.1", url.port or 6379) as forwarder,
    ):
        through = f"redis://127.0.0.1:{forwarder.port}{url.path or '/0'}"
        async with two_instances(database_url, tmp_path, through) as (a, b):
            ledger = a.runtime.storage.ledger
            topup = await a.client.post(
                "/v1/credits/topup", json={"amount_usd": 100}, headers=a.auth()
            )
            assert topup.status_code == 200
            probe = await a.client.post("/v1/chat/completions", json=BODY, headers=a.auth())
            assert probe.status_code == 200
            await wait_until(lambda: a.runtime.accountant.stats.settled >= 1)
            await flushed(a, b)
            rows, _ = await ledger.list(a.org_id, type="usage", limit=1, offset=0)
            charge = -rows[0].amount_micros
            cap = 30 * charge
            r = await a.client.post(
                "/v1/keys",
                json={"name": "capped", "daily_budget_usd": cap / 1e6},
                headers=a.auth(),
            )
            key_id, key = r.json()["id"], r.json()["key"]

            async def spent() -> int:
                return (await ledger.key_spend([key_id], now_us()))[key_id][0]

            for i in range(4):  # before: through Redis, both instances
                assert await chat((a, b)[i % 2], key) == (200, "")
            await flushed(a, b)

            await forwarder.cut()
            during = 0
            for _ in range(60):  # during: on instance a's own view, up to the cap
                status, code = await chat(a, key)
                if status != 200:
                    assert code == "budget_exceeded"
                    break
                during += 1
                await flushed(a, b)
            assert during > 10
            assert a.runtime.accountant.stats.shared_unavailable >= during
            await flushed(a, b)
            await forwarder.restore()

            async def redis_agrees() -> bool:
                await flushed(a, b)  # a reconciles at its next flush
                account = await ledger.account(a.org_id)
                bal = await redis.get(f"gw:bill:bal:{a.org_id}")
                day = await redis.get(f"gw:bill:spend:{key_id}:{day_of(now_us()).label}")
                return (
                    bal is not None
                    and int(bal) == account.balance_micros
                    and day is not None
                    and int(day) == await spent()
                )

            await wait_until_async(redis_agrees, limit_s=5.0)  # right after recovery

            async def burst_one(i: int) -> None:
                status, code = await chat((a, b)[i % 2], key)
                assert status == 200 or code == "budget_exceeded"

            async with trio.open_nursery() as nursery:  # after: 100 at once over both
                for i in range(100):
                    nursery.start_soon(burst_one, i)
            await flushed(a, b)
            assert await spent() <= cap
            account = await ledger.account(a.org_id)
            assert account.balance_micros == await ledger.sum_rows(a.org_id)
