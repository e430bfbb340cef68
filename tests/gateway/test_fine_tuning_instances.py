"""Fine-tuning across instances and restarts: a gateway stopped mid-job and another started on
the same database finishes it (the provider sees one upload and one job), and two instances
watching at once keep one watcher per job (one provider job, no repeated event)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from bench.upstream import UpstreamServer, serve_upstream
from gateway.config import Config
from tests.gateway.fine_tuning_rig import (
    BASE,
    FT_TOML,
    GOOD_LINE_TOKENS,
    create,
    dataset,
    drive,
    ft_watcher,
    hold_for,
    job,
    micros,
    status_is,
    upload,
    upstream_calls,
)
from tests.harness import gateway_config, running_gateway
from tests.inference import inference_toml

pytestmark = pytest.mark.storage


@asynccontextmanager
async def provider() -> AsyncIterator[UpstreamServer]:
    async with trio.open_nursery() as nursery:
        upstream: UpstreamServer = await nursery.start(serve_upstream)
        upstream.behavior.fine_tune_schedule_s = (2.0, 2.0, 6.0)
        yield upstream
        nursery.cancel_scope.cancel()


def config(
    database_url: str, data_dir: Path, upstream: UpstreamServer, key: bytes | None
) -> Config:
    """Instances share the database, the master key and the data dir (local blobs: a shared
    volume)."""
    env = {} if key is None else {"GATEWAY_MASTER_KEY": base64.b64encode(key).decode()}
    return gateway_config(
        database_url, data_dir, toml=inference_toml(upstream.url) + FT_TOML, **env
    )


async def test_a_restarted_gateway_resumes_the_job(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with provider() as upstream:
        first = config(database_url, tmp_path, upstream, None)
        async with running_gateway(first) as a:
            key = (await a.client.post("/v1/keys", json={"name": "k"}, headers=a.auth())).json()[
                "key"
            ]
            await a.client.post("/v1/credits/topup", json={"amount_usd": 100}, headers=a.auth())
            content = dataset(6)
            file_id = await upload(a, key, content)
            job_id = (await create(a, key, model=BASE, training_file=file_id)).json()["id"]
            await drive(mock_clock, [ft_watcher(a)], status_is(a, key, job_id, "running"))
            org = a.org_id
        assert first.master_key is not None
        second = config(database_url, tmp_path, upstream, first.master_key)
        async with running_gateway(second) as b:
            await drive(mock_clock, [ft_watcher(b)], status_is(b, key, job_id, "succeeded"))
            done = await job(b, key, job_id)
            assert done["fine_tuned_model"].startswith(f"ft:{BASE}:{org}::")
            assert upstream_calls(upstream, "POST", "/v1/files") == 1
            assert upstream_calls(upstream, "POST", "/v1/fine_tuning/jobs") == 1
            r = await b.client.get(f"/v1/fine_tuning/jobs/{job_id}/events", headers=b.auth(key))
            messages = [e["message"] for e in r.json()["data"]]
            assert len(messages) == len(set(messages)) == 4
            ledger = b.runtime.storage.ledger
            account = await ledger.account(org)
            assert account.balance_micros == 100_000_000 - micros(6 * GOOD_LINE_TOKENS)
            assert await ledger.sum_rows(org) == account.balance_micros
            assert hold_for(content) > micros(6 * GOOD_LINE_TOKENS)


async def test_two_instances_watch_each_job_once(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with provider() as upstream:
        first = config(database_url, tmp_path, upstream, None)
        assert first.master_key is not None
        second = config(database_url, tmp_path, upstream, first.master_key)
        async with running_gateway(first) as a, running_gateway(second) as b:
            key = (await a.client.post("/v1/keys", json={"name": "k"}, headers=a.auth())).json()[
                "key"
            ]
            await a.client.post("/v1/credits/topup", json={"amount_usd": 100}, headers=a.auth())
            file_id = await upload(a, key, dataset(3))
            ids = [
                (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
                for gw in (a, b, a, b)
            ]
            watchers = [ft_watcher(a), ft_watcher(b)]

            async def all_done() -> bool:
                for job_id in ids:
                    if (await job(b, key, job_id))["status"] != "succeeded":
                        return False
                return True

            await drive(mock_clock, watchers, all_done)
            assert upstream_calls(upstream, "POST", "/v1/files") == 4
            assert upstream_calls(upstream, "POST", "/v1/fine_tuning/jobs") == 4
            for job_id in ids:
                r = await a.client.get(f"/v1/fine_tuning/jobs/{job_id}/events", headers=a.auth(key))
                assert len(r.json()["data"]) == 4
            rows = await a.runtime.storage.db.fetch(
                "SELECT type FROM events WHERE org_id = :org AND type LIKE 'fine_tuning%'",
                {"org": a.org_id},
            )
            assert [r["type"] for r in rows] == ["fine_tuning.job.succeeded"] * 4


async def test_a_crash_before_the_provider_job_id_was_stored_creates_no_second_job(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with provider() as upstream:
        first = config(database_url, tmp_path, upstream, None)
        async with running_gateway(first) as a:
            key = (await a.client.post("/v1/keys", json={"name": "k"}, headers=a.auth())).json()[
                "key"
            ]
            await a.client.post("/v1/credits/topup", json={"amount_usd": 100}, headers=a.auth())
            file_id = await upload(a, key, dataset(2))
            job_id = (await create(a, key, model=BASE, training_file=file_id)).json()["id"]

            async def created_at_provider() -> bool:
                return upstream_calls(upstream, "POST", "/v1/fine_tuning/jobs") == 1

            await drive(mock_clock, [ft_watcher(a)], created_at_provider)
            await a.runtime.supervisor.stop("fine_tuning_watcher")
            # As if it had died after the provider created the job, before storing its id.
            await a.runtime.storage.db.execute(
                "UPDATE fine_tuning_jobs SET provider_job_id = NULL WHERE id = :id", {"id": job_id}
            )
        assert first.master_key is not None
        second = config(database_url, tmp_path, upstream, first.master_key)
        async with running_gateway(second) as b:
            await drive(mock_clock, [ft_watcher(b)], status_is(b, key, job_id, "succeeded"))
            assert upstream_calls(upstream, "POST", "/v1/fine_tuning/jobs") == 1
            assert upstream_calls(upstream, "POST", "/v1/files") == 1
            [provider_job_id] = upstream.fine_tuning.jobs
            stored = await b.runtime.storage.fine_tuning.by_id(job_id)
            assert stored is not None and stored.provider_job_id == provider_job_id
