"""`python -m bench.stripe`: run the simulated Stripe as its own process until SIGINT/SIGTERM.

Prints `stripe listening on <url>` (flushed) once it accepts connections; exits 0 on the first
signal. Point the SDK's api base at that URL; events go to `--webhook-url` signed with
`--webhook-secret`. Tests in another process drive it with `/_sim/...` (bench/stripe/server.py).
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Sequence
from functools import partial

import trio

from bench.stripe.server import serve_stripe


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.stripe", description="simulated Stripe")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=12111)
    parser.add_argument("--secret-key", default="sk_test_sim", help="the API key it accepts")
    parser.add_argument("--webhook-url", default=None, help="where events are POSTed")
    parser.add_argument("--webhook-secret", default=None, help="the whsec_... signing secret")
    parser.add_argument(
        "--retry-schedule",
        default="0.5,1,2,4",
        help="seconds between webhook attempts, comma-separated (default 0.5,1,2,4)",
    )
    return parser


async def _serve_until_signalled(args: argparse.Namespace) -> None:
    schedule = tuple(float(s) for s in args.retry_schedule.split(",") if s.strip())
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            sim = await nursery.start(
                partial(
                    serve_stripe,
                    secret_key=args.secret_key,
                    host=args.host,
                    port=args.port,
                    webhook_url=args.webhook_url,
                    webhook_secret=args.webhook_secret,
                    retry_schedule_s=schedule,
                )
            )
            print(f"stripe listening on {sim.url}", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    trio.run(_serve_until_signalled, args)
    return 0
