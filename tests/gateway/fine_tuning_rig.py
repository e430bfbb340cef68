"""Shared by the fine-tuning tests: a gateway on the simulated upstream (which is also a
fine-tuning provider, bench/upstream/fine_tuning_routes.py) with a dated, training-priced base
model, uploads of training files, and `drive`: a MockClock moved to wherever every watcher
sleeps until, until a condition holds (database waits run on threads and sockets, so the clock
never autojumps: see tests/actors/webhooks/test_delivery.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import msgspec
import trio
import trio.testing

from actors.fine_tuning import FineTuningWatcher
from bench.upstream import UpstreamServer
from gateway.fine_tuning.area import FineTuningArea
from protocol.credentials import CredentialKind
from tests.harness import Gateway
from tests.inference import Rig, inference_rig

BASE = "tiny-2024-07-18"  # a [[models]] alias on provider `sim` (OpenAI kind, unrestricted)
UPSTREAM_BASE = "sim-small-2024-07-18"
TRAINING_PRICE = Decimal(3)  # USD per million training tokens
FEE = Decimal("0.04")  # the free plan's fee

FT_TOML = f"""
[[models]]
id = "{BASE}"
provider = "sim"
upstream = "{UPSTREAM_BASE}"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5
training_usd_per_mtok = {TRAINING_PRICE}

[[models]]
id = "pricey-2024-07-18"
provider = "sim"
upstream = "sim-small-2024-07-18"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5
training_usd_per_mtok = 10000

[[models]]
id = "unpriced-2024-07-18"
provider = "sim"
upstream = "sim-unpriced-2024-07-18"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5

[[models]]
id = "claude-2024-07-18"
provider = "claude"
upstream = "claude-haiku-2024-07-18"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5
training_usd_per_mtok = 3

[[providers]]
name = "chatonly"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
supports = ["chat"]

[[models]]
id = "chatty-2024-07-18"
provider = "chatonly"
upstream = "chatty-2024-07-18"
input_usd_per_mtok = 0.5
output_usd_per_mtok = 1.5
training_usd_per_mtok = 3

[fine_tuning]
poll_initial_s = 1
poll_max_s = 8
lease_ttl_s = 30
scan_interval_s = 5
events_poll_s = 1
max_example_tokens = 1000
"""

GOOD_LINE = b'{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}'
GOOD_LINE_TOKENS = 5  # ceil((4 + 2 + 9 + 5) / 4): roles and contents, about 4 bytes a token


def ft_watcher(gw: Gateway) -> FineTuningWatcher:
    """The instance's fine-tuning watcher (the fine-tuning area's actor)."""
    return gw.runtime.area(FineTuningArea).watcher


def dataset(lines: int = 10) -> bytes:
    return b"\n".join([GOOD_LINE] * lines) + b"\n"


def micros(tokens: int, epochs: int = 3, price: Decimal = TRAINING_PRICE) -> int:
    """tokens x epochs x price per million x (1 + fee), to the micro-dollar, half up."""
    exact = Decimal(tokens) * epochs * price / 1_000_000 * (1 + FEE) * 1_000_000
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def hold_for(content: bytes, epochs: int = 3) -> int:
    return micros(-(-len(content) // 4), epochs)


@asynccontextmanager
async def ft_rig(
    database_url: str,
    tmp_path: Path,
    *,
    credit_usd: float | None = 100.0,
    extra_toml: str = "",
    **env: str,
) -> AsyncIterator[Rig]:
    async with inference_rig(
        database_url, tmp_path, credit_usd=credit_usd, extra_toml=FT_TOML + extra_toml, **env
    ) as rig:
        rig.upstream.behavior.fine_tune_schedule_s = (2.0, 2.0, 6.0)
        yield rig


async def upload(gw: Gateway, key: str, content: bytes, purpose: str = "fine-tune") -> str:
    r = await gw.client.post(
        "/v1/files",
        data={"purpose": purpose},
        files={"file": ("train.jsonl", content, "application/jsonl")},
        headers=gw.auth(key),
    )
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


async def create(gw: Gateway, key: str, **body: Any) -> httpx.Response:
    return await gw.client.post("/v1/fine_tuning/jobs", json=body, headers=gw.auth(key))


async def job(gw: Gateway, key: str, job_id: str) -> dict[str, Any]:
    r = await gw.client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=gw.auth(key))
    assert r.status_code == 200, r.text
    return dict(r.json())


async def real_pause() -> None:
    """Let threads and sockets make progress without moving the MockClock."""
    await trio.to_thread.run_sync(time.sleep, 0.002)


async def drive(
    clock: trio.testing.MockClock,
    watchers: Sequence[FineTuningWatcher],
    done: Callable[[], Awaitable[bool]],
    *,
    limit_s: float = 60,
) -> None:
    """Until `await done()`: whenever every watcher sleeps, jump to the earliest wake-up."""
    deadline = time.monotonic() + limit_s
    while not await done():
        assert time.monotonic() < deadline, "condition never met"
        wakes = [w.asleep_until for w in watchers]
        if all(t is not None for t in wakes):
            soonest = min(t for t in wakes if t is not None)
            clock.jump(max(0.0, soonest - trio.current_time()) + 0.001)
        for _ in range(5):
            await real_pause()


def status_is(gw: Gateway, key: str, job_id: str, *statuses: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await job(gw, key, job_id))["status"] in statuses

    return check


def upstream_calls(upstream: UpstreamServer, method: str, path: str) -> int:
    return sum(1 for r in upstream.requests if r.method == method and r.path == path)


def decode(body: bytes) -> Any:
    return msgspec.json.decode(body)


async def other_org_key(gw: Gateway) -> str:
    """A secret key of a second organization on the same gateway."""
    runtime = gw.runtime
    org = await runtime.storage.orgs.create("other-org")
    credential = runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await runtime.storage.orgs.add_management_key(org.id, credential)
    r = await gw.client.post("/v1/keys", json={"name": "theirs"}, headers=gw.auth(credential.value))
    assert r.status_code == 200, r.text
    return str(r.json()["key"])


async def outbox(gw: Gateway) -> list[tuple[str, Any]]:
    rows = await gw.runtime.storage.db.fetch(
        "SELECT type, data FROM events WHERE org_id = :org AND type LIKE 'fine_tuning%'"
        " ORDER BY seq",
        {"org": gw.org_id},
    )
    return [(r["type"], decode(r["data"].encode())) for r in rows]


async def job_rows(gw: Gateway, job_id: str) -> list[tuple[str, str, int]]:
    rows, _ = await gw.runtime.storage.ledger.list(gw.org_id, limit=50, offset=0)
    return sorted((t.id, t.type, t.amount_micros) for t in rows if job_id in t.id)
