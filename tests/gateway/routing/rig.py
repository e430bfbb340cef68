"""A gateway with a model of two deployments, each on its own simulated provider (bench/upstream,
real sockets): `east` and `west`. Models: `ha` (east/sim-a, west/sim-b; routing fields from the
test), and the inference rig's own (tests/inference.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from bench.upstream import UpstreamServer, serve_upstream
from tests.inference import UPSTREAM_KEY, Rig, inference_rig

MESSAGES = [{"role": "user", "content": "hi"}]


def deployments_toml(east_url: str, west_url: str, model: str, kind: str = "openai") -> str:
    """Providers `east` and `west` and the `[[models]]` table `model` (its routing fields and
    deployments, written by the test)."""
    providers = "".join(
        f"""
[[providers]]
name = "{name}"
kind = "{kind}"
base_url = "{url}/v1"
api_key = "{UPSTREAM_KEY}"
read_timeout_s = 0.5
"""
        for name, url in (("east", east_url), ("west", west_url))
    )
    return providers + model


@dataclass
class Routed:
    rig: Rig
    east: UpstreamServer
    west: UpstreamServer

    async def chat(self, **extra: Any) -> Any:
        return await self.rig.chat({"model": "ha", "messages": MESSAGES, **extra})

    def served(self) -> tuple[int, int]:
        """Requests each provider received (east, west)."""
        return len(self.east.requests), len(self.west.requests)


@asynccontextmanager
async def routed_rig(
    database_url: str, tmp_path: Path, model: str, *, kind: str = "openai"
) -> AsyncIterator[Routed]:
    async with trio.open_nursery() as nursery:
        west: UpstreamServer = await nursery.start(serve_upstream)
        async with inference_rig(
            database_url,
            tmp_path,
            extra_toml=lambda east_url: deployments_toml(east_url, west.url, model, kind),
        ) as rig:
            yield Routed(rig, rig.upstream, west)
        nursery.cancel_scope.cancel()
