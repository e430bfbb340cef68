"""`gateway serve --workers 2` as operators run it: the parent supervises its workers. A worker
killed with SIGKILL is restarted (and counted in /metrics), no connection hangs on a socket
nobody accepts on, and SIGTERM to the parent stops every worker within the graceful timeout."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import trio

from tests.gateway.test_cli import BOOTSTRAP, _env, _gateway, _run, _start
from tests.gateway.test_metrics_workers import drain
from tests.waiting import wait_until, wait_until_async

# The shared venv may hold another checkout installed in development mode: run this one.
ROOT = Path(__file__).resolve().parents[2]
GRACEFUL_S = 2.0
ANSWER_WITHIN_S = 3.0  # a hung connection shows as a timeout


def workers_of(parent: int) -> set[int]:
    """The parent's worker processes (not multiprocessing's resource tracker)."""
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except FileNotFoundError:
        return set()
    found = set()
    for pid in map(int, children):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"spawn_main" in cmdline:
            found.add(pid)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def restarts_total(text: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gateway_worker_restarts_total")
    )


async def start_workers(tmp_path: Path) -> tuple[trio.Process, str]:
    config = tmp_path / "gateway.toml"
    config.write_text(f"[server]\naccess_log = false\ngraceful_timeout_s = {GRACEFUL_S}\n")
    args = _gateway("serve", "--workers", "2", "--config", str(config))
    return await _start(args, _env(tmp_path, PYTHONPATH=str(ROOT)), tmp_path)


async def one_request(client: httpx.AsyncClient) -> bool:
    """A new connection, a keyed request: True if it answered 200 in time."""
    try:
        with trio.fail_after(ANSWER_WITHIN_S):
            r = await client.get("/v1/models")
    except (httpx.TransportError, trio.TooSlowError):
        return False
    return r.status_code == 200


async def test_a_killed_worker_is_restarted_and_no_connection_hangs(tmp_path: Path) -> None:
    process, url = await start_workers(tmp_path)
    outcomes: list[tuple[float, bool]] = []
    headers = {"Authorization": f"Bearer {BOOTSTRAP}", "Connection": "close"}
    try:
        async with (
            trio.open_nursery() as nursery,
            httpx.AsyncClient(base_url=url, headers=headers, timeout=None) as client,
        ):
            assert process.stdout is not None
            nursery.start_soon(drain, process.stdout)

            async def keep_asking() -> None:
                while True:
                    outcomes.append((time.monotonic(), await one_request(client)))
                    await trio.sleep(0.01)

            nursery.start_soon(keep_asking)
            await wait_until(lambda: len(workers_of(process.pid)) == 2)
            await wait_until(lambda: sum(ok for _, ok in outcomes) >= 10)
            before = workers_of(process.pid)
            victim = min(before)
            os.kill(victim, signal.SIGKILL)
            killed_at = time.monotonic()
            await wait_until(lambda: len(workers_of(process.pid) - before) == 1)
            replacement = (workers_of(process.pid) - before).pop()

            async def restart_counted() -> bool:
                return restarts_total((await client.get("/metrics")).text) == 1

            # Once the replacement serves, every request answers, on fresh connections.
            await wait_until_async(restart_counted, limit_s=30)
            settled = time.monotonic()
            await wait_until(lambda: sum(1 for t, _ in outcomes if t > settled) >= 40)
            after = [ok for t, ok in outcomes if t > settled]
            assert all(after), after.count(False)
            # Requests while the worker was dead either answered or failed fast (no hang).
            assert all(ok for t, ok in outcomes if t < killed_at)
            nursery.cancel_scope.cancel()
        assert alive(replacement)
        survivors = workers_of(process.pid)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(GRACEFUL_S + 10):
            status = await process.wait()
        assert status == 0
        assert time.monotonic() - started < GRACEFUL_S + 5
        assert not any(alive(pid) for pid in survivors)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_sigint_to_the_parent_stops_every_worker(tmp_path: Path) -> None:
    process, url = await start_workers(tmp_path)
    try:
        assert process.stdout is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, process.stdout)
            await wait_until(lambda: len(workers_of(process.pid)) == 2)
            workers = workers_of(process.pid)
            process.send_signal(signal.SIGINT)
            with trio.fail_after(GRACEFUL_S + 10):
                status = await process.wait()
            nursery.cancel_scope.cancel()
        assert status == 0
        await wait_until(lambda: not any(alive(pid) for pid in workers))
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_worker_that_cannot_start_stops_the_server(tmp_path: Path) -> None:
    """A worker that dies before it ever served (here: the S3 store it must reach at start is
    not there) is not restarted in a loop: the parent stops and exits 1, saying why."""
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[files]\nstore = "s3"\ns3_bucket = "nowhere"\ns3_endpoint_url = "http://127.0.0.1:1"\n'
        's3_region = "us-east-1"\n'
    )
    env = _env(tmp_path, PYTHONPATH=str(ROOT), AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y")
    result = await _run(_gateway("serve", "--workers", "2", "--config", str(config)), env, tmp_path)
    assert result.returncode == 1
    assert b"gateway listening on" not in result.stdout
    assert b"before it served: stopping" in result.stderr
