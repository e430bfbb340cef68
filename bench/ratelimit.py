"""`bench ratelimit`: the rate limiter with Redis, an earlier revision against this tree.

One hot key (a `rate_limit_rpm` far above what the load reaches, so every request is admitted
and every one is counted), both gateways in multi-instance mode on the same Redis, billing off
(so the only Redis traffic is the limiter's). First both are loaded at once (requests/s and CPU
per request, side by side, as `bench compare`); then each alone for a while, counting the
commands Redis executed (`INFO commandstats`, summed over every command) per admitted
request.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import coredis

from bench.compare import BASE, HEAD, Side, compare_sides
from bench.load import Scenario
from bench.report import Row
from bench.revision import Revision
from bench.suite import MODEL, GatewayCode, SuiteOptions, measure, stack

HOT_KEY_RPM = 100_000_000


@dataclass(frozen=True)
class Commands:
    side: str
    admitted: int
    commands: int
    by_name: tuple[tuple[str, int], ...] = ()  # the commands counted, most frequent first

    @property
    def per_request(self) -> float:
        return self.commands / self.admitted if self.admitted else float("nan")

    def line(self) -> str:
        return (
            f"{self.side}: {self.commands} Redis commands for {self.admitted} admitted requests"
            f" = {self.per_request:.3f} per request"
            + (" (" + ", ".join(f"{n} {c}" for n, c in self.by_name) + ")" if self.by_name else "")
        )


async def redis_commands(client: coredis.Redis[Any]) -> Counter[str]:
    """Commands Redis has executed since its start, by command (`cmdstat_*` calls)."""
    stats = await client.info("commandstats")
    return Counter(
        {
            name.removeprefix("cmdstat_"): int(entry.get("calls", 0))
            for name, entry in stats.items()
            if name.startswith("cmdstat_") and isinstance(entry, dict)
        }
    )


async def count_commands(
    name: str, code: GatewayCode, redis_url: str, options: SuiteOptions, concurrency: int
) -> Commands:
    """`code`'s gateway alone on Redis: commands per admitted request over one load run."""
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
        async with (
            stack(
                Path(tmp) / name,
                None,
                chunk_interval_ms=None,
                completion_tokens=options.completion_tokens,
                max_connections=concurrency + 64,
                keepalive=concurrency + 64,
                billing=False,
                code=code,
                redis_url=redis_url,
                key_rpm=HOT_KEY_RPM,
            ) as s,
            coredis.Redis.from_url(redis_url) as client,
        ):
            scenario = Scenario(
                name,
                s.gateway.url.rstrip("/") + "/v1",
                s.gateway_key,
                MODEL,
                False,
                concurrency,
                duration_s=options.duration_s,
                warmup_s=0.0,
                max_tokens=options.completion_tokens,
            )
            before = await redis_commands(client)
            measured = await measure(scenario, progress=options.progress)
            after = await redis_commands(client)
    counted = after - before
    counted["info"] -= 1  # our own first INFO
    counted = +counted
    admitted = measured.result.statuses.get(200, 0)
    return Commands(name, admitted, sum(counted.values()), tuple(counted.most_common(5)))


async def compare_ratelimit(
    base: Revision, options: SuiteOptions, redis_url: str
) -> tuple[list[Row], str]:
    """Rows of both sides loaded at once, and the commands-per-request lines."""
    top = max(options.concurrency, default=64)
    sides = (
        Side(BASE, base.code, billing=False, redis_url=redis_url, key_rpm=HOT_KEY_RPM),
        Side(HEAD, billing=False, redis_url=redis_url, key_rpm=HOT_KEY_RPM),
    )
    rows = await compare_sides(sides, options)
    counted = [
        await count_commands(side.name, side.code, redis_url, options, top) for side in sides
    ]
    return rows, "".join(c.line() + "\n" for c in counted)
