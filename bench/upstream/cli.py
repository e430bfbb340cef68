"""`python -m bench.upstream`: run the simulated upstream as its own process until SIGINT/SIGTERM.

Prints `upstream listening on <url>` (flushed) once it accepts connections; exits 0 on the first
signal, closing every connection at once.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Sequence
from functools import partial

import trio

from bench.upstream.behavior import UpstreamBehavior
from bench.upstream.server import serve_upstream


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.upstream", description="simulated OpenAI/Anthropic upstream"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay before headers")
    parser.add_argument("--chunk-interval-ms", type=float, default=0.0, help="delay between chunks")
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--completion-tokens", type=int, default=20)
    return parser


def behavior_from(args: argparse.Namespace) -> UpstreamBehavior:
    return UpstreamBehavior(
        latency_s=args.latency_ms / 1000,
        chunk_interval_s=args.chunk_interval_ms / 1000,
        tokens_per_chunk=args.tokens_per_chunk,
        completion_tokens=args.completion_tokens,
    )


async def _serve_until_signalled(host: str, port: int, behavior: UpstreamBehavior) -> None:
    # Catch signals before announcing readiness, so a signal right after the line is handled.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(
                partial(serve_upstream, host=host, port=port, behavior=behavior)
            )
            print(f"upstream listening on {server.url}", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    trio.run(_serve_until_signalled, args.host, args.port, behavior_from(args))
    return 0
