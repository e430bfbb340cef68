"""A key's `rate_limit_rpm` counts every request it makes, on every route (issue #19, item 9),
over real HTTP on every backend, with the limiter of one instance and with Redis's: uploads
and fine-tuning jobs included, once per request, with the rate-limit headers, before the body
is read; management keys are never limited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.backends import REDIS_URL
from tests.gateway.fine_tuning_rig import BASE, create, dataset, ft_rig
from tests.gateway.keys_client import create_key, error_of
from tests.harness import Gateway

LIMITERS = ["local"] + (["redis"] if REDIS_URL else [])


def _env(limiter: str) -> dict[str, str]:
    return {"GATEWAY_REDIS_URL": REDIS_URL} if limiter == "redis" and REDIS_URL else {}


def _remaining(r: Any) -> str:
    assert r.headers["x-ratelimit-limit-requests"] == "3", r.headers
    return str(r.headers["x-ratelimit-remaining-requests"])


def _limited(r: Any) -> None:
    assert r.status_code == 429, r.text
    assert error_of(r)["code"] == "rate_limit_exceeded"
    assert int(r.headers["retry-after"]) >= 1
    assert r.headers["x-ratelimit-remaining-requests"] == "0"


async def _files(gw: Gateway) -> int:
    listed = await gw.client.get("/v1/files", headers=gw.auth())
    return len(listed.json()["data"])


@pytest.mark.parametrize("limiter", LIMITERS)
async def test_uploads_jobs_and_every_other_route_count(
    database_url: str, tmp_path: Path, limiter: str
) -> None:
    async with ft_rig(database_url, tmp_path, **_env(limiter)) as rig:
        gw = rig.gateway
        await gw.runtime.supervisor.stop("fine_tuning_watcher")
        key = (await create_key(gw, name="slow", rate_limit_rpm=3))["key"]
        auth = gw.auth(key)
        uploaded = await gw.client.post(
            "/v1/files",
            data={"purpose": "fine-tune"},
            files={"file": ("train.jsonl", dataset(2), "application/jsonl")},
            headers=auth,
        )
        assert uploaded.status_code == 200, uploaded.text
        assert _remaining(uploaded) == "2"
        file_id = uploaded.json()["id"]
        missing = await gw.client.get("/v1/files/file_missing", headers=auth)
        assert missing.status_code == 404 and _remaining(missing) == "1"  # errors count too
        job = await create(gw, key, model=BASE, training_file=file_id)
        assert job.status_code == 200, job.text
        assert _remaining(job) == "0"
        job_id = job.json()["id"]

        # Over the limit: refused before the body is read, so nothing is stored.
        big = await gw.client.post(
            "/v1/files",
            data={"purpose": "user_data"},
            files={"file": ("big.bin", b"x" * 2_000_000)},
            headers=auth,
        )
        _limited(big)
        _limited(await create(gw, key, model=BASE, training_file=file_id))
        for method, path in [
            ("GET", "/v1/files"),
            ("GET", f"/v1/files/{file_id}"),
            ("GET", f"/v1/files/{file_id}/content"),
            ("DELETE", f"/v1/files/{file_id}"),
            ("GET", "/v1/fine_tuning/jobs"),
            ("GET", f"/v1/fine_tuning/jobs/{job_id}"),
            ("GET", f"/v1/fine_tuning/jobs/{job_id}/events"),
            ("POST", f"/v1/fine_tuning/jobs/{job_id}/cancel"),
            ("DELETE", "/v1/models/ft:x"),
            ("GET", "/v1/responses/resp_x"),
            ("GET", "/v1/webhooks"),
            ("GET", "/v1/credits"),
            ("GET", "/v1/keys"),
            ("GET", "/v1/models"),
        ]:
            r = await gw.client.request(method, path, headers=auth)
            assert r.status_code == 429, (method, path, r.text)
        assert await _files(gw) == 1
        job_now = await gw.client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=gw.auth())
        assert job_now.json()["status"] == "queued"  # the refused cancel did nothing
        # Management keys have no rate limit; other keys have their own.
        assert (await gw.client.get("/v1/files", headers=gw.auth())).status_code == 200
        assert (await gw.client.get("/v1/files", headers=gw.auth(rig.key))).status_code == 200


async def test_a_chat_request_is_counted_once(database_url: str, tmp_path: Path) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw = rig.gateway
        key = (await create_key(gw, name="slow", rate_limit_rpm=3))["key"]
        body = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        first = await rig.chat(body, key=key)
        assert first.status_code == 200 and _remaining(first) == "2"
        models = await gw.client.get("/v1/models", headers=gw.auth(key))
        assert models.status_code == 200 and _remaining(models) == "1"
        assert _remaining(await rig.chat(body, key=key)) == "0"
        _limited(await rig.chat(body, key=key))
        assert len(rig.upstream.requests) == 2
