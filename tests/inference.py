"""A gateway wired to the bench suite's simulated upstream, for the inference tests.

Providers: `sim` (OpenAI wire format) and `claude` (Anthropic wire format), both served by one
simulated upstream. Models: `small` → sim/sim-small and `haiku` → claude/claude-haiku, priced;
`sim/unpriced` resolves but has no price.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import trio

from bench.upstream import UpstreamServer, serve_upstream
from tests.harness import Gateway, gateway_config, running_gateway
from tests.waiting import wait_until

UPSTREAM_KEY = "sim-provider-secret-key"
PRICE_IN = Decimal("0.5")
PRICE_OUT = Decimal("1.5")


def inference_toml(
    upstream_url: str,
    *,
    read_timeout_s: float = 5.0,
    keepalive_s: float = 15.0,
    graceful_timeout_s: float = 30.0,
) -> str:
    return f"""
[server]
sse_keepalive_s = {keepalive_s}
graceful_timeout_s = {graceful_timeout_s}

[[providers]]
name = "sim"
kind = "openai"
base_url = "{upstream_url}/v1"
api_key = "{UPSTREAM_KEY}"
read_timeout_s = {read_timeout_s}

[[providers]]
name = "claude"
kind = "anthropic"
base_url = "{upstream_url}/v1"
api_key = "{UPSTREAM_KEY}"
read_timeout_s = {read_timeout_s}

[[providers]]
name = "dead"  # nothing listens on port 1: connections are refused
kind = "openai"
base_url = "http://127.0.0.1:1/v1"

[[models]]
id = "gone"
provider = "dead"
upstream = "gone"
input_usd_per_mtok = 1
output_usd_per_mtok = 1

[[models]]
id = "small"
provider = "sim"
upstream = "sim-small"
input_usd_per_mtok = {PRICE_IN}
output_usd_per_mtok = {PRICE_OUT}

[[models]]
id = "embed"
provider = "sim"
upstream = "sim-embed"
input_usd_per_mtok = 0.02

[[models]]
id = "haiku"
provider = "claude"
upstream = "claude-haiku"
input_usd_per_mtok = {PRICE_IN}
output_usd_per_mtok = {PRICE_OUT}
"""


@dataclass
class Rig:
    gateway: Gateway
    upstream: UpstreamServer
    key: str  # a secret key with every scope

    async def chat(self, body: dict[str, Any], key: str | None = None) -> Any:
        return await self.gateway.client.post(
            "/v1/chat/completions", json=body, headers=self.gateway.auth(key or self.key)
        )


@asynccontextmanager
async def inference_rig(
    database_url: str,
    tmp_path: Path,
    *,
    read_timeout_s: float = 5.0,
    keepalive_s: float = 15.0,
    graceful_timeout_s: float = 30.0,
    credit_usd: float | None = 100.0,
    extra_toml: str | Callable[[str], str] = "",
    stop: trio.Event | None = None,
    **env: str,
) -> AsyncIterator[Rig]:
    """With `credit_usd`, the org is topped up that much first (billing is on by default).
    `extra_toml` may be a function of the upstream's URL (for providers of its own). `stop`:
    see `running_gateway`."""
    async with trio.open_nursery() as nursery:
        upstream: UpstreamServer = await nursery.start(partial(serve_upstream))
        toml = inference_toml(
            upstream.url,
            read_timeout_s=read_timeout_s,
            keepalive_s=keepalive_s,
            graceful_timeout_s=graceful_timeout_s,
        )
        toml += extra_toml(upstream.url) if callable(extra_toml) else extra_toml
        config = gateway_config(database_url, tmp_path, toml=toml, **env)
        async with running_gateway(config, stop=stop) as gw:
            r = await gw.client.post("/v1/keys", json={"name": "all"}, headers=gw.auth())
            if credit_usd is not None:
                topup = await gw.client.post(
                    "/v1/credits/topup", json={"amount_usd": credit_usd}, headers=gw.auth()
                )
                assert topup.status_code == 200, topup.text
            yield Rig(gw, upstream, r.json()["key"])
        nursery.cancel_scope.cancel()


async def ledger(rig: Rig, settled: int = 0) -> tuple[int, list[Any]]:
    """The stored balance and the usage rows, once `settled` requests were charged (a stream
    is charged just after its last byte left) and everything charged was written; checks the
    balance is the sum of the ledger's rows."""
    runtime = rig.gateway.runtime
    await wait_until(lambda: runtime.accountant.stats.settled >= settled)
    await runtime.accountant.flush()
    org = rig.gateway.org_id
    rows, _ = await runtime.storage.ledger.list(org, type="usage", limit=200, offset=0)
    account = await runtime.storage.ledger.account(org)
    assert await runtime.storage.ledger.sum_rows(org) == account.balance_micros
    return account.balance_micros, rows


def sse_frames(text: str) -> list[str]:
    """The `data:` payloads of an SSE body, in order (comments skipped)."""
    return [block[len("data: ") :] for block in text.split("\n\n") if block.startswith("data: ")]


def chunks(text: str) -> list[dict[str, Any]]:
    return [msgspec.json.decode(f) for f in sse_frames(text) if f != "[DONE]"]


async def send_raw_chat(rig: Rig, body: dict[str, Any]) -> trio.SocketStream:
    """A chat request sent on a raw socket (so that closing it really leaves); the caller
    reads the answer and closes it."""
    host, port = rig.gateway.url.removeprefix("http://").split(":")
    payload = msgspec.json.encode(body)
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {rig.key}\r\ncontent-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    return stream


async def open_raw_stream(rig: Rig, body: dict[str, Any], frames: int) -> trio.SocketStream:
    """A chat stream on a raw socket (so that closing it really leaves mid-stream), once
    `frames` data frames arrived; the caller closes it."""
    stream = await send_raw_chat(rig, body)
    received = b""
    with trio.fail_after(10):
        while received.count(b"data: ") < frames:
            received += await stream.receive_some()
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    return stream


@asynccontextmanager
async def two_instances(
    database_url: str, tmp_path: Path, redis_url: str
) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """Two gateways on one database and one Redis (same master key), one simulated upstream."""
    async with trio.open_nursery() as nursery:
        upstream = await nursery.start(serve_upstream)
        async with two_gateways(
            database_url, tmp_path, redis_url, inference_toml(upstream.url)
        ) as (
            a,
            b,
        ):
            yield a, b
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def two_gateways(
    database_url: str, tmp_path: Path, redis_url: str, toml: str
) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """Two gateways of config `toml` on one database and one Redis (same master key)."""
    config_a = gateway_config(database_url, tmp_path / "a", toml=toml, GATEWAY_REDIS_URL=redis_url)
    assert config_a.master_key is not None
    config_b = gateway_config(
        database_url,
        tmp_path / "b",
        toml=toml,
        GATEWAY_REDIS_URL=redis_url,
        GATEWAY_MASTER_KEY=base64.b64encode(config_a.master_key).decode(),
    )
    async with running_gateway(config_a) as a, running_gateway(config_b) as b:
        yield a, b
