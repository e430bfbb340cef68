"""The Fine-tuning API's edges over real HTTP: every bad field of the create body (400 naming
it), 401/402/403/404, another organization's jobs and files, list and event paging, and the
SSE stream of events that ends with the job."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from tests.gateway.fine_tuning_rig import (
    BASE,
    create,
    dataset,
    drive,
    ft_rig,
    ft_watcher,
    other_org_key,
    status_is,
    upload,
)
from tests.inference import sse_frames

pytestmark = pytest.mark.storage


async def test_each_bad_field_is_a_400_naming_it(database_url: str, tmp_path: Path) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        await gw.runtime.supervisor.stop("fine_tuning_watcher")
        good = await upload(gw, key, dataset(2))
        user_data = await upload(gw, key, dataset(2), purpose="user_data")
        theirs = await upload(gw, await other_org_key(gw), dataset(2))
        cases: list[tuple[dict[str, Any], str | None, str | None]] = [
            ({"training_file": good}, "model", None),
            ({"model": "tiny", "training_file": good}, "model", "invalid_model"),
            ({"model": "sim/sim-small", "training_file": good}, "model", "invalid_model"),
            ({"model": "x-2024-13-01", "training_file": good}, "model", "invalid_model"),
            ({"model": "nobody-2024-07-18", "training_file": good}, "model", "model_not_found"),
            ({"model": "claude-2024-07-18", "training_file": good}, "model", "unsupported_model"),
            ({"model": "chatty-2024-07-18", "training_file": good}, "model", "unsupported_model"),
            (
                {"model": "unpriced-2024-07-18", "training_file": good},
                "model",
                "model_price_unknown",
            ),
            ({"model": BASE}, "training_file", None),
            ({"model": BASE, "training_file": "file_nope"}, "training_file", "invalid_file"),
            ({"model": BASE, "training_file": user_data}, "training_file", "invalid_file"),
            ({"model": BASE, "training_file": theirs}, "training_file", "invalid_file"),
            ({"model": BASE, "training_file": 7}, "training_file", None),
            (
                {"model": BASE, "training_file": good, "validation_file": theirs},
                "validation_file",
                "invalid_file",
            ),
            (
                {"model": BASE, "training_file": good, "hyperparameters": {"n_epochs": 0}},
                "hyperparameters.n_epochs",
                None,
            ),
            (
                {"model": BASE, "training_file": good, "hyperparameters": {"n_epochs": 51}},
                "hyperparameters.n_epochs",
                None,
            ),
            (
                {"model": BASE, "training_file": good, "hyperparameters": {"n_epochs": "many"}},
                "hyperparameters.n_epochs",
                None,
            ),
            (
                {"model": BASE, "training_file": good, "hyperparameters": {"batch_size": 0}},
                "hyperparameters.batch_size",
                None,
            ),
            (
                {
                    "model": BASE,
                    "training_file": good,
                    "hyperparameters": {"learning_rate_multiplier": 0},
                },
                "hyperparameters.learning_rate_multiplier",
                None,
            ),
            (
                {"model": BASE, "training_file": good, "hyperparameters": {"epochs": 2}},
                "hyperparameters.epochs",
                None,
            ),
            ({"model": BASE, "training_file": good, "suffix": "a:b"}, "suffix", None),
            ({"model": BASE, "training_file": good, "suffix": "x" * 65}, "suffix", None),
            ({"model": BASE, "training_file": good, "suffix": ""}, "suffix", None),
            ({"model": BASE, "training_file": good, "seed": -1}, "seed", None),
            ({"model": BASE, "training_file": good, "seed": 2**31}, "seed", None),
            ({"model": BASE, "training_file": good, "color": "red"}, "color", None),
        ]
        for body, param, code in cases:
            r = await create(gw, key, **body)
            assert r.status_code == 400, (body, r.text)
            error = r.json()["error"]
            assert error["param"] == param, (body, error)
            assert error["type"] == "invalid_request_error"
            if code is not None:
                assert error["code"] == code, (body, error)
        for raw in (b"", b"[]", b"{", b"null", b'{"model": "' + b"x" * 300 + b'"}'):
            r = await gw.client.post(
                "/v1/fine_tuning/jobs",
                content=raw,
                headers={**gw.auth(key), "content-type": "application/json"},
            )
            assert r.status_code == 400, (raw, r.text)
        listed = await gw.client.get("/v1/fine_tuning/jobs", headers=gw.auth(key))
        assert listed.json()["data"] == []  # nothing was created by any of them
        r = await create(
            gw,
            key,
            model=BASE,
            training_file=good,
            hyperparameters={"n_epochs": "auto", "batch_size": 4, "learning_rate_multiplier": 0.5},
        )
        assert r.status_code == 200, r.text
        assert r.json()["hyperparameters"] == {
            "n_epochs": 3,
            "batch_size": 4,
            "learning_rate_multiplier": 0.5,
        }


async def test_auth_scope_and_missing_jobs(database_url: str, tmp_path: Path) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        await gw.runtime.supervisor.stop("fine_tuning_watcher")
        file_id = await upload(gw, key, dataset(2))
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        r = await gw.client.post(
            "/v1/keys",
            json={"name": "chat only", "scopes": ["chat:completions"]},
            headers=gw.auth(),
        )
        narrow = r.json()["key"]
        paths = [
            ("POST", "/v1/fine_tuning/jobs"),
            ("GET", "/v1/fine_tuning/jobs"),
            ("GET", f"/v1/fine_tuning/jobs/{job_id}"),
            ("POST", f"/v1/fine_tuning/jobs/{job_id}/cancel"),
            ("GET", f"/v1/fine_tuning/jobs/{job_id}/events"),
        ]
        for method, path in paths:
            r = await gw.client.request(method, path, json={})
            assert r.status_code == 401, (method, path)
            r = await gw.client.request(method, path, json={}, headers=gw.auth("sk-nope"))
            assert r.status_code == 401, (method, path)
            r = await gw.client.request(method, path, json={}, headers=gw.auth(narrow))
            assert r.status_code == 403, (method, path, r.text)
        for method, path in paths[2:]:
            missing = path.replace(job_id, "ftjob_" + "x" * 24)
            r = await gw.client.request(method, missing, headers=gw.auth(key))
            assert r.status_code == 404, (method, path)
            assert r.json()["error"]["code"] == "job_not_found"


async def test_another_org_can_neither_see_nor_cancel_a_job(
    database_url: str, tmp_path: Path
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        await gw.runtime.supervisor.stop("fine_tuning_watcher")
        file_id = await upload(gw, key, dataset(2))
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        theirs = await other_org_key(gw)
        for method, path in [
            ("GET", f"/v1/fine_tuning/jobs/{job_id}"),
            ("POST", f"/v1/fine_tuning/jobs/{job_id}/cancel"),
            ("GET", f"/v1/fine_tuning/jobs/{job_id}/events"),
        ]:
            r = await gw.client.request(method, path, headers=gw.auth(theirs))
            assert r.status_code == 404, (method, path)
            assert r.json()["error"]["code"] == "job_not_found"
        r = await gw.client.get(
            "/v1/fine_tuning/jobs/" + job_id + "/events",
            headers={**gw.auth(theirs), "accept": "text/event-stream"},
        )
        assert r.status_code == 404
        listed = await gw.client.get("/v1/fine_tuning/jobs", headers=gw.auth(theirs))
        assert listed.json() == {"object": "list", "data": [], "has_more": False}
        after = await gw.client.get(f"/v1/fine_tuning/jobs?after={job_id}", headers=gw.auth(theirs))
        assert after.json()["data"] == []
        mine = await gw.client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=gw.auth(key))
        assert mine.json()["status"] == "queued"  # the other org's cancel changed nothing


async def test_insufficient_credit_is_a_402_and_creates_nothing(
    database_url: str, tmp_path: Path
) -> None:
    async with ft_rig(database_url, tmp_path, credit_usd=None) as rig:
        gw, key = rig.gateway, rig.key
        file_id = await upload(gw, key, dataset(2))
        r = await create(gw, key, model=BASE, training_file=file_id)
        assert r.status_code == 402, r.text
        assert r.json()["error"]["code"] == "insufficient_credits"
        listed = await gw.client.get("/v1/fine_tuning/jobs", headers=gw.auth(key))
        assert listed.json()["data"] == []
        assert await gw.runtime.storage.ledger.sum_rows(gw.org_id) == 0


async def test_lists_are_paged_newest_first(database_url: str, tmp_path: Path) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        await gw.runtime.supervisor.stop("fine_tuning_watcher")
        file_id = await upload(gw, key, dataset(2))
        ids = []
        for _ in range(5):
            ids.append((await create(gw, key, model=BASE, training_file=file_id)).json()["id"])
            await trio.to_thread.run_sync(time.sleep, 0.002)  # distinct creation times
        seen: list[str] = []
        after = None
        while True:
            query = "?limit=2" + (f"&after={after}" if after else "")
            page = (
                await gw.client.get("/v1/fine_tuning/jobs" + query, headers=gw.auth(key))
            ).json()
            seen += [j["id"] for j in page["data"]]
            if not page["has_more"]:
                break
            after = page["data"][-1]["id"]
        assert seen == list(reversed(ids))
        for bad in ("limit=0", "limit=101", "limit=x"):
            r = await gw.client.get(f"/v1/fine_tuning/jobs?{bad}", headers=gw.auth(key))
            assert r.status_code == 400
            assert r.json()["error"]["param"] == "limit"
        page = await gw.client.get(
            f"/v1/fine_tuning/jobs/{ids[0]}/events?limit=1", headers=gw.auth(key)
        )
        body = page.json()
        assert body["object"] == "list" and body["has_more"] is False
        assert body["data"][0]["object"] == "fine_tuning.job.event"
        assert body["data"][0]["message"] == f"Created fine-tuning job: {ids[0]}"


async def test_events_stream_as_sse_until_the_job_ends(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        file_id = await upload(gw, key, dataset(3))
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        received: list[bytes] = []
        ended = trio.Event()
        head: dict[str, str] = {}

        async def listen() -> None:
            async with gw.client.stream(
                "GET",
                f"/v1/fine_tuning/jobs/{job_id}/events",
                headers={**gw.auth(key), "accept": "text/event-stream"},
            ) as response:
                assert response.status_code == 200
                head["content-type"] = response.headers["content-type"]
                async for chunk in response.aiter_bytes():
                    received.append(chunk)
            ended.set()

        async def finished() -> bool:
            return ended.is_set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen)
            await drive(mock_clock, [ft_watcher(gw)], finished)
        assert head["content-type"] == "text/event-stream"
        frames = sse_frames(b"".join(received).decode())
        assert frames[-1] == "[DONE]"
        events = [msgspec.json.decode(f) for f in frames[:-1]]
        assert [e["message"] for e in events][:3] == [
            f"Created fine-tuning job: {job_id}",
            "Validating training file",
            "Fine-tuning job started",
        ]
        assert events[-1]["message"].startswith("The job has successfully completed")
        assert len({e["id"] for e in events}) == len(events) == 4
        assert all(e["object"] == "fine_tuning.job.event" for e in events)
        # Once ended, a new stream sends the whole history and ends at once.
        r = await gw.client.get(
            f"/v1/fine_tuning/jobs/{job_id}/events",
            headers={**gw.auth(key), "accept": "text/event-stream"},
        )
        assert sse_frames(r.text)[:-1] == frames[:-1]
        assert await status_is(gw, key, job_id, "succeeded")()


async def test_a_quiet_event_stream_sends_keepalives(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:  # [server] sse_keepalive_s = 15
        gw, key = rig.gateway, rig.key
        await gw.runtime.supervisor.stop("fine_tuning_watcher")  # the job stays queued
        file_id = await upload(gw, key, dataset(2))
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        received: list[bytes] = []
        left = trio.Event()

        async def listen() -> None:
            """On a raw socket, so that closing it really leaves mid-stream."""
            host, port = gw.url.removeprefix("http://").split(":")
            stream = await trio.open_tcp_stream(host, int(port))
            async with stream:
                await stream.send_all(
                    f"GET /v1/fine_tuning/jobs/{job_id}/events HTTP/1.1\r\nhost: x\r\n"
                    f"accept: text/event-stream\r\nauthorization: Bearer {key}\r\n\r\n".encode()
                )
                while b": keepalive" not in b"".join(received):
                    received.append(await stream.receive_some())
            left.set()

        async def tick(seconds: int) -> None:
            for _ in range(seconds):
                mock_clock.jump(1)
                for _ in range(5):
                    await trio.to_thread.run_sync(time.sleep, 0.002)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen)
            limit = time.monotonic() + 30
            while b"data: " not in b"".join(received):
                assert time.monotonic() < limit
                await trio.to_thread.run_sync(time.sleep, 0.002)
            await tick(14)  # 14 s of silence: no keepalive yet
            assert b": keepalive" not in b"".join(received)
            while not left.is_set():
                assert time.monotonic() < limit
                await tick(1)
        body = b"".join(received).decode()
        assert body.count(": keepalive") == 1
        assert body.startswith("HTTP/1.1 200") and "text/event-stream" in body
        assert body.count("data: ") == 1  # the creation event
        assert "[DONE]" not in body  # still queued
        # The server saw the client leave: no request is left in flight (the gateway stops
        # without waiting).
