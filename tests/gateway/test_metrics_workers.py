"""`gateway serve --workers 2`: a scrape answered by either worker counts every worker's
requests (prometheus_client multiprocess mode, gateway/operations/metrics_shared.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

from tests.gateway.test_cli import _env, _gateway, _start, _stop
from tests.metrics_lint import lint

# The shared venv may hold another checkout installed in development mode: run this one.
ROOT = Path(__file__).resolve().parents[2]


def requests_total(text: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gateway_requests_total{")
    )


def counting_workers(metrics_dir: Path) -> list[Path]:
    """The workers that counted a request (prometheus_client writes a file per process)."""
    return list(metrics_dir.glob("counter_*.db"))


async def drain(stream: trio.abc.ReceiveStream) -> None:
    while await stream.receive_some():
        pass


async def test_every_scrape_counts_the_requests_of_every_worker(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text("[server]\naccess_log = false\n")
    args = _gateway("serve", "--workers", "2", "--config", str(config))
    process, url = await _start(args, _env(tmp_path, PYTHONPATH=str(ROOT)), tmp_path)
    metrics_dir = tmp_path / "var" / "metrics"
    try:
        async with trio.open_nursery() as nursery:
            assert process.stdout is not None
            nursery.start_soon(drain, process.stdout)
            sent = 0
            # A new connection per request, so that SO_REUSEPORT spreads them over both
            async with httpx.AsyncClient(base_url=url, headers={"Connection": "close"}) as client:
                with trio.fail_after(60):
                    while sent < 20 or (len(counting_workers(metrics_dir)) < 2 and sent < 500):
                        assert (await client.get("/healthz")).status_code == 200
                        sent += 1
                assert len(counting_workers(metrics_dir)) == 2, sent
                for scrape in range(10):
                    text = (await client.get("/metrics")).text
                    # each earlier scrape is counted, this one is not yet
                    assert requests_total(text) == sent + scrape, (scrape, text)
                    assert "gateway_actor_restarts_total" in text
                    lint(text, models=(), providers=())  # no model configured: none, other
                    # each worker's own process figures, by its index
                    for worker in ("0", "1"):
                        assert f'process_cpu_seconds_total{{worker="{worker}"}}' in text
                        assert any(
                            line.startswith("python_info{") and f'worker="{worker}"' in line
                            for line in text.splitlines()
                        )
                    await trio.sleep(0.02)  # the last scrape's count is taken after its answer
            nursery.cancel_scope.cancel()
    finally:
        assert await _stop(process) == 0
