"""PostgreSQL partitioned (bytes held, nothing refused or reset): no database call waits past
`[database] statement_timeout_s`; requests that need the database answer 503
`database_unavailable` with Retry-After in time, and the gateway serves again once the
partition heals, without connections the partition left dead in its pool."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.backends import POSTGRES_URL
from tests.harness import Gateway, gateway_config, running_gateway
from tests.tcp_forwarder import Forwarder, forwarding
from tests.waiting import wait_until_async

pytestmark = pytest.mark.skipif(POSTGRES_URL is None, reason="needs GATEWAY_TEST_DATABASE_URL")
TIMEOUT_S = 0.5
SLACK_S = 0.6  # scheduling, the HTTP round trip, two cores shared by the suite


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


@asynccontextmanager
async def partitionable_gateway(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Gateway, Forwarder]]:
    target = urlsplit(database_url)
    assert target.hostname is not None
    async with forwarding(target.hostname, target.port or 5432) as forwarder:
        toml = f"[database]\nstatement_timeout_s = {TIMEOUT_S}\n"
        config = gateway_config(_through(database_url, forwarder.port), tmp_path, toml=toml)
        async with running_gateway(config) as gw:
            try:
                yield gw, forwarder
            finally:
                forwarder.heal()


async def _create_key(gw: Gateway, name: str) -> httpx.Response:
    return await gw.client.post("/v1/keys", json={"name": name}, headers=gw.auth())


async def _break(forwarder: Forwarder, fault: str) -> None:
    if fault == "blackhole":
        forwarder.blackhole()  # bytes held: nothing refused, nothing reset
    else:
        await forwarder.cut()  # connections reset, new ones refused


async def _mend(forwarder: Forwarder, fault: str) -> None:
    if fault == "blackhole":
        forwarder.heal()
    else:
        await forwarder.restore()


@pytest.mark.parametrize("backend", ["postgresql"])
@pytest.mark.parametrize("fault", ["blackhole", "cut"])
async def test_an_unreachable_database_is_503_within_the_timeout_then_serves_again(
    database_url: str, tmp_path: Path, fault: str
) -> None:
    async with partitionable_gateway(database_url, tmp_path) as (gw, forwarder):
        assert (await _create_key(gw, "before")).status_code == 200
        await _break(forwarder, fault)
        for i in range(3):  # pooled connections and new ones alike
            started = time.monotonic()
            r = await _create_key(gw, f"during-{i}")
            elapsed = time.monotonic() - started
            assert r.status_code == 503, r.text
            error = r.json()["error"]
            assert error["code"] == "database_unavailable" and error["type"] == "server_error"
            assert r.headers["retry-after"] == "1"
            assert elapsed < TIMEOUT_S + SLACK_S, elapsed
        await _mend(forwarder, fault)

        async def serves() -> bool:
            return (await _create_key(gw, "after")).status_code == 200

        await wait_until_async(serves)
        # No connection the fault left behind is handed out again: each of these would
        # wait on a dead one (and then fail) if the pool had kept it.
        for i in range(12):
            started = time.monotonic()
            r = await _create_key(gw, f"healed-{i}")
            assert r.status_code == 200, r.text
            assert time.monotonic() - started < TIMEOUT_S
