"""`python -m bench.upstream`: run the simulated upstream as its own process until SIGINT/SIGTERM.

Prints `upstream listening on <url>` (flushed) once it accepts connections; exits 0 on the first
signal, closing every connection at once. `--fault MODEL:SETTING=VALUE,...` (repeatable) makes
requests to one model fail (bench/upstream/fault_spec.py); a bad one exits 2 with the reason.
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Sequence
from functools import partial

import trio

from bench.upstream.behavior import UpstreamBehavior
from bench.upstream.fault_spec import FaultSpecError, SettingValue, faults_from, parse_fault
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
    parser.add_argument(
        "--fault",
        type=_fault,
        action="append",
        default=[],
        metavar="MODEL:SETTING=VALUE[,...]",
        help="make requests to MODEL fail, e.g. sim-a:error_rate=0.5,every=2 (repeatable); "
        "settings: the fields of bench/upstream/faults.py Faults",
    )
    parser.add_argument("--fault-seed", type=int, default=0, help="seed of the fault draws")
    return parser


def _fault(text: str) -> tuple[str, dict[str, SettingValue]]:
    try:
        return parse_fault(text)
    except FaultSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def behavior_from(args: argparse.Namespace) -> UpstreamBehavior:
    """Raises FaultSpecError when the --fault options disagree or a value is out of range."""
    return UpstreamBehavior(
        latency_s=args.latency_ms / 1000,
        chunk_interval_s=args.chunk_interval_ms / 1000,
        tokens_per_chunk=args.tokens_per_chunk,
        completion_tokens=args.completion_tokens,
        faults=faults_from(args.fault),
        fault_seed=args.fault_seed,
    )


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, UpstreamBehavior]:
    """The options and the behavior they ask for; a bad option exits 2 with argparse's usage."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args, behavior_from(args)
    except FaultSpecError as exc:
        parser.error(f"argument --fault: {exc}")


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
    args, behavior = parse_args(argv)
    trio.run(_serve_until_signalled, args.host, args.port, behavior)
    return 0
