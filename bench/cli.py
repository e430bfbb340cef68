"""`gateway bench` (and `python -m bench.cli`): the standard suite, two gateways loaded at once
(billing on against off, every success an event against none, or this tree against an earlier
revision), the Files API's upload and download throughput (`files`), transcription uploads
and the gateway's memory (`audio`), or load against any OpenAI-compatible base URL. Prints the
table on stdout; writes CSV and PNGs when asked.

Exit status: 0 when every scenario ran without errors, 1 when some requests failed or a piece of
the suite did not start, 2 on bad arguments, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import trio

from bench.audio import AudioOptions, run_audio
from bench.audio import report_json as audio_report
from bench.audio import table as audio_table
from bench.compare import (
    compare_billing,
    compare_events,
    compare_guardrails,
    compare_revision,
    compare_tracing,
)
from bench.failover import DEFAULT_FAULT, run_failover
from bench.files import PURPOSES, FilesOptions, report_json, run_files, table
from bench.http_client import Endpoint
from bench.load import Scenario
from bench.processes import ROOT, SuiteError, raise_fd_limit
from bench.ratelimit import compare_ratelimit
from bench.report import (
    Row,
    billing_overhead,
    events_overhead,
    guardrails_overhead,
    head_against_base,
    terminal_table,
    tracing_overhead,
    workers_scaling,
    write_csv,
    write_plots,
)
from bench.revision import default_cache, describe_tree, materialise
from bench.suite import SuiteOptions, measure, run_suite


def _concurrency(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("concurrency values must be at least 1")
    return values


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _ratio(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:  # NaN too
        raise argparse.ArgumentTypeError("must be from 0 to 1")
    return value


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _purposes(text: str) -> tuple[str, ...]:
    values = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [value for value in values if value not in PURPOSES]
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"purposes are among {', '.join(PURPOSES)}")
    return values


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gateway bench", description="load tests of the gateway or any OpenAI-compatible API"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    suite = commands.add_parser(
        "suite", help="start upstream + gateway, measure direct vs gateway, JSON and SSE"
    )
    suite.add_argument("--concurrency", type=_concurrency, default=(1, 8, 64), metavar="1,8,64")
    suite.add_argument("--duration", type=_positive, default=10.0, help="seconds per scenario")
    suite.add_argument(
        "--slow-streams", type=int, default=1000, help="concurrent 1 chunk/s streams (0: skip)"
    )
    suite.add_argument("--out", type=Path, default=Path("bench/out"), help="CSV and PNG folder")
    suite.add_argument(
        "--no-billing",
        action="store_true",
        help="run the gateway with [billing] enabled = false (compare the cost of billing)",
    )
    suite.add_argument(
        "--workers",
        type=int,
        default=2,
        help="compare this many gateway workers with one, unpinned, at the top concurrency "
        "(below 2: skip)",
    )

    billing = commands.add_parser(
        "billing",
        help="billing on and off loaded at the same time on one CPU: what billing costs",
    )
    billing.add_argument("--concurrency", type=_concurrency, default=(64,), metavar="64")
    billing.add_argument("--duration", type=_positive, default=10.0, help="seconds per mode")
    billing.add_argument("--out", type=Path, help="write bench.csv here")

    guardrails = commands.add_parser(
        "guardrails",
        help="a PII guardrail (input and output) and no plugin loaded at the same time on one "
        "CPU: what the guardrail costs",
    )
    guardrails.add_argument("--concurrency", type=_concurrency, default=(64,), metavar="64")
    guardrails.add_argument("--duration", type=_positive, default=10.0, help="seconds per mode")
    guardrails.add_argument("--out", type=Path, help="write bench.csv here")

    events = commands.add_parser(
        "events",
        help="completion.success sampled at 1.0 and at 0 loaded at the same time on one CPU: "
        "what an event per request costs",
    )
    events.add_argument("--concurrency", type=_concurrency, default=(64,), metavar="64")
    events.add_argument("--duration", type=_positive, default=10.0, help="seconds per mode")
    events.add_argument("--out", type=Path, help="write bench.csv here")

    tracing = commands.add_parser(
        "tracing",
        help="OpenTelemetry tracing on (every request, to a local stand-in collector) and off "
        "loaded at the same time on one CPU: what tracing costs",
    )
    tracing.add_argument("--concurrency", type=_concurrency, default=(64,), metavar="64")
    tracing.add_argument("--duration", type=_positive, default=10.0, help="seconds per mode")
    tracing.add_argument(
        "--sample-ratio", type=_ratio, default=1.0, help="[telemetry] sample_ratio (default 1)"
    )
    tracing.add_argument("--out", type=Path, help="write bench.csv here")

    compare = commands.add_parser(
        "compare",
        help="an earlier revision's gateway and this tree's loaded at the same time on one CPU",
    )
    compare.add_argument("--base", required=True, metavar="REV", help="git revision to compare")
    compare.add_argument("--concurrency", type=_at_least_one, default=64)
    compare.add_argument("--duration", type=_positive, default=10.0, help="seconds per mode")
    compare.add_argument("--out", type=Path, help="write bench.csv here")
    compare.add_argument(
        "--base-python",
        metavar="PATH",
        help="run the base gateway with this interpreter as is (default: a virtualenv built "
        "once for REV from its pyproject)",
    )
    compare.add_argument(
        "--cache",
        type=Path,
        default=default_cache(),
        help="where REV's tree and virtualenv are kept (default: %(default)s)",
    )

    ratelimit = commands.add_parser(
        "ratelimit",
        help="the rate limiter on Redis, an earlier revision against this tree: requests/s "
        "side by side, then Redis commands per admitted request of each",
    )
    ratelimit.add_argument("--base", required=True, metavar="REV", help="git revision")
    ratelimit.add_argument("--redis-url", required=True, help="a Redis both gateways share")
    ratelimit.add_argument("--concurrency", type=_at_least_one, default=64)
    ratelimit.add_argument("--duration", type=_positive, default=10.0, help="seconds per run")
    ratelimit.add_argument("--base-python", metavar="PATH", help="as for `bench compare`")
    ratelimit.add_argument("--cache", type=Path, default=default_cache())
    ratelimit.add_argument("--out", type=Path, help="write bench.csv here")

    failover = commands.add_parser(
        "failover",
        help="a model of two deployments, one failing on command: share of requests that "
        "succeeded and their p99, JSON and SSE",
    )
    failover.add_argument("--concurrency", type=_at_least_one, default=64)
    failover.add_argument("--duration", type=_positive, default=10.0, help="seconds per mode")
    failover.add_argument(
        "--fault",
        default=DEFAULT_FAULT,
        metavar="SETTINGS",
        help="how the second deployment fails, as the simulated upstream's --fault settings "
        f"(default {DEFAULT_FAULT}; e.g. reset_after_frames=5, rate_limit_rate=0.5)",
    )
    failover.add_argument("--out", type=Path, help="write bench.csv here")

    files = commands.add_parser(
        "files",
        help="POST /v1/files and GET its content through a gateway: MB/s against straight to "
        "disk, and the gateway's RSS",
    )
    files.add_argument(
        "--mb",
        type=_concurrency,
        default=(100,),
        metavar="100[,512]",
        help="file sizes in MB (10^6 bytes); 512 is capped at what the body limit lets through",
    )
    files.add_argument(
        "--purpose",
        type=_purposes,
        default=PURPOSES,
        metavar=",".join(PURPOSES),
        help="fine-tune: chat JSONL, validated as it streams; user_data: random bytes",
    )
    files.add_argument("--rounds", type=_at_least_one, default=1, help="uploads per size/purpose")
    files.add_argument("--out", type=Path, help="write files.json here")
    files.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")

    audio = commands.add_parser(
        "audio",
        help="POST /v1/audio/transcriptions of a large WAV through a gateway: MB/s and the "
        "gateway's RSS (flat: the file is streamed to the provider)",
    )
    audio.add_argument("--mb", type=_at_least_one, default=24, help="file size in MB (10^6 bytes)")
    audio.add_argument("--rounds", type=_at_least_one, default=3, help="uploads")
    audio.add_argument("--out", type=Path, help="write audio.json here")
    audio.add_argument("--no-progress", action="store_true", help="no progress lines")
    audio.add_argument(
        "--file-first",
        action="store_true",
        help="the file part before `model` (curl's order: held by the gateway until the model)",
    )

    run = commands.add_parser("run", help="load one OpenAI-compatible base URL")
    run.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080/v1")
    run.add_argument("--api-key", required=True)
    run.add_argument("--model", required=True)
    run.add_argument("--stream", action="store_true", help="SSE streams instead of JSON")
    run.add_argument("--concurrency", type=_concurrency, default=(1, 8, 64), metavar="1,8,64")
    run.add_argument("--duration", type=_positive, default=10.0, help="seconds per scenario")
    run.add_argument("--max-tokens", type=int, default=20)
    run.add_argument("--timeout", type=_positive, default=30.0, help="per request, seconds")
    run.add_argument("--direct-url", help="the upstream itself, to report added latency")
    run.add_argument("--direct-api-key", help="key for --direct-url (default: --api-key)")
    run.add_argument("--direct-model", help="model for --direct-url (default: --model)")
    run.add_argument("--out", type=Path, help="write bench.csv and PNG plots here")

    for sub in (suite, billing, guardrails, events, tracing, compare, ratelimit, failover, run):
        sub.add_argument("--warmup", type=float, default=0.5, help="unrecorded seconds first")
        sub.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    return parser


def _scenario(
    args: argparse.Namespace, concurrency: int, name: str, base_url: str, api_key: str, model: str
) -> Scenario:
    return Scenario(
        name,
        base_url,
        api_key,
        model,
        args.stream,
        concurrency,
        duration_s=args.duration,
        warmup_s=args.warmup,
        max_tokens=args.max_tokens,
        timeout_s=args.timeout,
    )


async def _run_target(args: argparse.Namespace) -> list[Row]:
    progress = not args.no_progress
    rows: list[Row] = []
    for c in args.concurrency:
        direct = None
        if args.direct_url:
            key = args.direct_api_key or args.api_key
            model = args.direct_model or args.model
            direct_sc = _scenario(args, c, "direct", args.direct_url, key, model)
            direct = (await measure(direct_sc, progress=progress)).result
            rows.append(Row.from_result(direct))
        target_sc = _scenario(args, c, "target", args.base_url, args.api_key, args.model)
        target = (await measure(target_sc, progress=progress)).result
        rows.append(Row.from_result(target, direct=direct))
    return rows


async def _compare(args: argparse.Namespace, options: SuiteOptions) -> tuple[list[Row], str]:
    """The rows of `bench compare` and the lines saying which code each side ran."""
    print(f"bench: materialising {args.base} under {args.cache}", file=sys.stderr)
    base = await materialise(args.base, cache=args.cache, python=args.base_python)
    head = await describe_tree()
    rows = await compare_revision(base, options)
    sides = (
        f"base: {args.base} = {base.sha}, gateway from {base.src}, python {base.python}\n"
        f"head: {head}, gateway from {ROOT}, python {sys.executable}\n"
    )
    return rows, sides


async def _ratelimit(args: argparse.Namespace, options: SuiteOptions) -> tuple[list[Row], str]:
    print(f"bench: materialising {args.base} under {args.cache}", file=sys.stderr)
    base = await materialise(args.base, cache=args.cache, python=args.base_python)
    rows, commands = await compare_ratelimit(base, options, args.redis_url)
    return rows, f"base: {args.base} = {base.sha}\n{commands}"


def _write_outputs(out: Path, rows: list[Row]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "bench.csv", rows)
    written = [out / "bench.csv"]
    try:
        written += write_plots(out, rows)
    except ImportError:
        print(
            "bench: matplotlib is not installed (`make bench` installs it): no plots",
            file=sys.stderr,
        )
    for path in written:
        print(f"wrote {path}")


def _files(args: argparse.Namespace) -> int:
    """`gateway bench files`: the table on stdout, files.json in `--out`; 1 when a
    download did not match what was uploaded (or the gateway did not start or answer)."""
    options = FilesOptions(
        sizes_mb=args.mb, purposes=args.purpose, rounds=args.rounds, progress=not args.no_progress
    )
    load_before = os.getloadavg()[0]
    try:
        rows = trio.run(run_files, options)
    except SuiteError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    load = (load_before, os.getloadavg()[0])
    print(table(rows), end="")
    print(
        f"load average (1 min): {load[0]:.2f} before, {load[1]:.2f} after, on {os.cpu_count()} CPUs"
    )
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "files.json"
        report = {**report_json(rows, options), "loadavg_1min": list(load)}
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {path}")
    return 0 if all(row.hash_ok for row in rows) else 1


def _audio(args: argparse.Namespace) -> int:
    """`gateway bench audio`: the table on stdout, audio.json in `--out`; 1 when an upload
    failed (or the gateway did not start)."""
    options = AudioOptions(
        size_mb=args.mb,
        rounds=args.rounds,
        progress=not args.no_progress,
        file_first=args.file_first,
    )
    try:
        rows = trio.run(run_audio, options)
    except SuiteError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    print(audio_table(rows), end="")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "audio.json"
        path.write_text(json.dumps(audio_report(rows, options), indent=2) + "\n")
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        for url in filter(None, (args.base_url, args.direct_url)):
            try:
                Endpoint.from_base_url(url)
            except ValueError as exc:
                parser.error(str(exc))
    if args.command == "files":
        return _files(args)
    if args.command == "audio":
        return _audio(args)
    raise_fd_limit()
    sides = ""
    try:
        if args.command == "suite":
            options = SuiteOptions(
                concurrency=args.concurrency,
                duration_s=args.duration,
                slow_streams=max(args.slow_streams, 0),
                warmup_s=args.warmup,
                progress=not args.no_progress,
                workers=args.workers,
                billing=not args.no_billing,
            )
            rows = trio.run(run_suite, options)
        elif args.command in ("billing", "events", "guardrails"):
            options = SuiteOptions(
                concurrency=args.concurrency,
                duration_s=args.duration,
                warmup_s=args.warmup,
                progress=not args.no_progress,
            )
            both = {
                "billing": compare_billing,
                "events": compare_events,
                "guardrails": compare_guardrails,
            }[args.command]
            rows = trio.run(both, options)
        elif args.command == "tracing":
            options = SuiteOptions(
                concurrency=args.concurrency,
                duration_s=args.duration,
                warmup_s=args.warmup,
                progress=not args.no_progress,
            )
            rows, sides = trio.run(compare_tracing, options, args.sample_ratio)
        elif args.command == "ratelimit":
            options = SuiteOptions(
                concurrency=(args.concurrency,),
                duration_s=args.duration,
                warmup_s=args.warmup,
                progress=not args.no_progress,
                modes=("json",),
            )
            rows, sides = trio.run(_ratelimit, args, options)
        elif args.command == "failover":
            options = SuiteOptions(
                concurrency=(args.concurrency,),
                duration_s=args.duration,
                warmup_s=args.warmup,
                progress=not args.no_progress,
            )
            rows, outcomes = trio.run(run_failover, options, args.fault)
            sides = "".join(outcome.line(args.fault) + "\n" for outcome in outcomes)
        elif args.command == "compare":
            options = SuiteOptions(
                concurrency=(args.concurrency,),
                duration_s=args.duration,
                warmup_s=args.warmup,
                progress=not args.no_progress,
            )
            rows, sides = trio.run(_compare, args, options)
        else:
            rows = trio.run(_run_target, args)
    except SuiteError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # every child process has been stopped by then
        print("bench: interrupted", file=sys.stderr)
        return 130
    print(terminal_table(rows), end="")
    print(workers_scaling(rows), end="")
    print(billing_overhead(rows), end="")
    print(events_overhead(rows), end="")
    print(guardrails_overhead(rows), end="")
    print(tracing_overhead(rows), end="")
    print(head_against_base(rows), end="")
    print(sides, end="")
    if args.out is not None:
        _write_outputs(args.out, rows)
    return 1 if any(row.errors for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
