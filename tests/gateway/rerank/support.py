"""A gateway with rerank models, wired to the simulated upstream's two rerank formats: `sim`
(OpenAI-compatible, /v1/rerank) and `co` (Cohere, /cohere/v1/rerank), plus helpers
the billing tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import trio

from bench.upstream import UpstreamServer, serve_upstream
from tests.harness import gateway_config, running_gateway
from tests.inference import UPSTREAM_KEY, Rig, inference_toml

SEARCH_UNIT_USD = Decimal("0.002")
ODD_UNIT_USD = Decimal("0.0000013")  # 3 units × 1.04 = 4.056 micro-USD: rounding shows
CREDIT = 100_000_000  # the rig's top-up, micro-USD
MAX_DOCUMENT_TOKENS = 512  # the `rerank` model's limit; the others use the default (4096)
HOSTILE = ("hostile-index", "hostile-duplicate", "hostile-nan", "hostile-text", "hostile-many")


def rerank_toml(upstream_url: str, read_timeout_s: float = 5.0) -> str:
    toml = f"""
[[providers]]
name = "co"
kind = "cohere"
base_url = "{upstream_url}/cohere/v1"
api_key = "{UPSTREAM_KEY}"
read_timeout_s = {read_timeout_s}

[[providers]]
name = "chatonly"  # the simulated upstream, said to serve chat only
kind = "openai"
base_url = "{upstream_url}/v1"
api_key = "{UPSTREAM_KEY}"
supports = ["chat"]

[[models]]
id = "chatonly-rerank"
provider = "chatonly"
upstream = "sim-rerank"
usd_per_search_unit = {SEARCH_UNIT_USD}

[[models]]
id = "rerank"
provider = "sim"
upstream = "sim-rerank"
usd_per_search_unit = {SEARCH_UNIT_USD}
max_document_tokens = {MAX_DOCUMENT_TOKENS}

[[models]]
id = "rerank-english-v3.0"
provider = "co"
upstream = "rerank-english-v3.0"
usd_per_search_unit = {SEARCH_UNIT_USD}

[[models]]
id = "co-billed-1"
provider = "co"
upstream = "billed-1"
usd_per_search_unit = {SEARCH_UNIT_USD}

[[models]]
id = "co-billed-99"
provider = "co"
upstream = "billed-99"
usd_per_search_unit = {SEARCH_UNIT_USD}

[[models]]
id = "rerank-odd"
provider = "co"
upstream = "rerank-odd"
usd_per_search_unit = {ODD_UNIT_USD}

[[models]]
id = "tei"
provider = "sim"
upstream = "tei-style"
usd_per_search_unit = {SEARCH_UNIT_USD}

[[models]]
id = "logits"
provider = "sim"
upstream = "hostile-logits"
usd_per_search_unit = {SEARCH_UNIT_USD}
"""
    for name in HOSTILE:
        for provider in ("sim", "co"):
            toml += f"""
[[models]]
id = "{provider}-{name}"
provider = "{provider}"
upstream = "{name}"
usd_per_search_unit = {SEARCH_UNIT_USD}
"""
    return toml


@asynccontextmanager
async def rerank_rig(
    database_url: str,
    tmp_path: Path,
    *,
    credit_usd: float | None = 100.0,
    read_timeout_s: float = 5.0,
) -> AsyncIterator[Rig]:
    """As tests/inference.inference_rig, with the rerank providers and models added (their
    base_url needs the upstream's address, which only exists once it listens)."""
    async with trio.open_nursery() as nursery:
        upstream: UpstreamServer = await nursery.start(serve_upstream)
        toml = inference_toml(upstream.url, read_timeout_s=read_timeout_s)
        toml += rerank_toml(upstream.url, read_timeout_s)
        config = gateway_config(database_url, tmp_path, toml=toml)
        async with running_gateway(config) as gw:
            r = await gw.client.post("/v1/keys", json={"name": "all"}, headers=gw.auth())
            if credit_usd is not None:
                topup = await gw.client.post(
                    "/v1/credits/topup", json={"amount_usd": credit_usd}, headers=gw.auth()
                )
                assert topup.status_code == 200, topup.text
            yield Rig(gw, upstream, r.json()["key"])
        nursery.cancel_scope.cancel()


async def rerank(rig: Rig, body: dict[str, Any], key: str | None = None) -> Any:
    return await rig.gateway.client.post(
        "/v1/rerank", json=body, headers=rig.gateway.auth(key or rig.key)
    )


def rerank_requests(rig: Rig) -> list[Any]:
    """The rerank requests the upstream received (either format), as JSON."""
    return [q.json() for q in rig.upstream.requests if q.path.endswith("/rerank")]
