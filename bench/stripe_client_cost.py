"""What the official Stripe SDK costs the gateway per call, two ways on Trio: its async client
(`HTTPXClient`, `*_async` methods, run by anyio on Trio) against its sync client
(`HTTPXClient(allow_sync_methods=True)`) called in `trio.to_thread.run_sync`.

    python -m bench.stripe_client_cost [N]

Each call creates and confirms a PaymentIntent (`pm_card_visa`) against the simulated Stripe
(bench/stripe/), run as its own process so that its CPU is not counted; a third way, the same
request by httpx alone, is the floor under the SDK. N calls (default 2,000, after 50
unmeasured) one after the other, then N at concurrency 16; per call: latency median and p99 in
ms, this process's CPU (every thread) in µs, and calls per second.
"""

from __future__ import annotations

import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import httpx
import stripe
import trio
from stripe.params import PaymentIntentCreateParams

from bench.stripe.forms import encode_form

KEY = "sk_test_cost"
CONCURRENCY = 16
WARMUP = 50
PARAMS: PaymentIntentCreateParams = {
    "amount": 1000,
    "currency": "usd",
    "payment_method": "pm_card_visa",
    "confirm": True,
    "metadata": {"org_id": "org_bench"},
}


@contextmanager
def _simulated_stripe() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.stripe", "--port", "0", "--secret-key", KEY],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("stripe listening on "):
            raise RuntimeError(f"the simulated Stripe did not start: {line!r}")
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(10)


async def _run(
    call: Callable[[], Awaitable[object]], n: int, concurrency: int
) -> tuple[list[float], float]:
    """Latencies of `n` calls, `concurrency` at a time, and the wall time of them all (s)."""
    latencies: list[float] = []
    left = n
    began = time.perf_counter()

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            start = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - start)

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return latencies, time.perf_counter() - began


Row = tuple[str, int, list[float], float, float]
Call = Callable[[], Awaitable[object]]


def _sdk_call(url: str, sync: bool) -> tuple[Call, Callable[[], Awaitable[None]]]:
    """One PaymentIntent creation through the SDK, and how to close its HTTP client."""
    http = stripe.HTTPXClient(allow_sync_methods=sync)
    client = stripe.StripeClient(
        KEY, base_addresses={"api": url}, http_client=http, max_network_retries=0
    )
    service = client.v1.payment_intents
    limiter = trio.CapacityLimiter(CONCURRENCY)
    close_async: Callable[[], Awaitable[None]] = http.close_async

    async def close() -> None:
        await close_async()
        if sync:
            close_sync: Callable[[], None] = http.close
            close_sync()

    async def call() -> object:
        if sync:
            return await trio.to_thread.run_sync(lambda: service.create(PARAMS), limiter=limiter)
        return await service.create_async(PARAMS)

    return call, close


def _raw_call(url: str) -> tuple[Call, Callable[[], Awaitable[None]]]:
    """The same request by httpx alone (the floor under the SDK): no SDK objects."""
    client = httpx.AsyncClient(base_url=url)
    body = encode_form(dict(PARAMS)).encode()
    headers = {
        "authorization": f"Bearer {KEY}",
        "content-type": "application/x-www-form-urlencoded",
    }

    async def call() -> object:
        response = await client.post(
            "/v1/payment_intents",
            content=body,
            headers={**headers, "idempotency-key": secrets.token_hex(16)},
        )
        return response.json()

    return call, client.aclose


async def _measure(url: str, n: int) -> list[Row]:
    rows = []
    ways: list[tuple[str, Callable[[], tuple[Call, Callable[[], Awaitable[None]]]]]] = [
        ("SDK async", lambda: _sdk_call(url, False)),
        ("SDK sync, thread", lambda: _sdk_call(url, True)),
        ("httpx alone", lambda: _raw_call(url)),
    ]
    for name, make in ways:
        call, close = make()
        await _run(call, WARMUP, 1)
        for concurrency in (1, CONCURRENCY):
            cpu = time.process_time()
            latencies, wall = await _run(call, n, concurrency)
            cpu_us = (time.process_time() - cpu) / n * 1e6
            rows.append((name, concurrency, latencies, cpu_us, n / wall))
        await close()
    return rows


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
    with _simulated_stripe() as url:
        rows = trio.run(_measure, url, n)
    print(
        f"{n} PaymentIntent creations (confirm=true) per row; "
        "the simulated Stripe in its own process"
    )
    print(
        f"{'client':16} {'conc':>4} {'p50 ms':>8} {'p99 ms':>8} {'CPU µs/call':>12} {'calls/s':>8}"
    )
    for name, concurrency, latencies, cpu_us, rate in rows:
        ordered = sorted(latencies)
        p50 = statistics.median(ordered) * 1e3
        p99 = ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1e3
        print(f"{name:16} {concurrency:4} {p50:8.2f} {p99:8.2f} {cpu_us:12.0f} {rate:8.0f}")


if __name__ == "__main__":
    main()
