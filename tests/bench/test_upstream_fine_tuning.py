"""The simulated upstream's fine-tuning provider over real HTTP, its schedule driven by Trio's
MockClock (no autojump: `clock.jump` moves it between requests): a job goes queued ->
validating_files -> running -> succeeded and its model then answers chat; failures on demand
(at validation, while running) and from a malformed file; cancel; events; model deletion;
counters; hostile bodies, paths and queries are 4xx answers."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest
import trio
import trio.testing

from bench.upstream import UpstreamServer, serve_upstream
from bench.upstream.fine_tuning import dataset_tokens

AUTH = {"authorization": "Bearer k"}
LINE = (
    b'{"messages": [{"role": "user", "content": "hi there"},'
    b' {"role": "assistant", "content": "hello"}]}\n'
)
TRAINING = LINE * 3  # (2 + 3) + (1 + 3) = 9 tokens a line
SCHEDULE = (10.0, 5.0, 20.0)


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> UpstreamServer:
    started: UpstreamServer = await nursery.start(serve_upstream)
    started.behavior.fine_tune_schedule_s = SCHEDULE
    return started


@pytest.fixture
async def client(upstream: UpstreamServer) -> Any:
    async with httpx.AsyncClient(base_url=upstream.url, headers=AUTH) as c:
        yield c


async def upload(
    client: httpx.AsyncClient, content: bytes = TRAINING, purpose: str = "fine-tune"
) -> str:
    r = await client.post(
        "/v1/files", data={"purpose": purpose}, files={"file": ("train.jsonl", content)}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "file" and body["id"].startswith("file-")
    assert (body["bytes"], body["filename"], body["purpose"], body["status"]) == (
        len(content),
        "train.jsonl",
        purpose,
        "processed",
    )
    return str(body["id"])


async def create(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    r = await client.post("/v1/fine_tuning/jobs", json={"model": "sim-small-2024-07-18", **fields})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def status(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    r = await client.get(f"/v1/fine_tuning/jobs/{job_id}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_a_job_moves_through_the_states_and_its_model_answers_chat(
    upstream: UpstreamServer, client: httpx.AsyncClient, mock_clock: trio.testing.MockClock
) -> None:
    file_id = await upload(client)
    job = await create(client, training_file=file_id, suffix="custom", seed=7)
    assert job["object"] == "fine_tuning.job" and job["id"].startswith("ftjob-")
    assert job["status"] == "queued"
    assert job["fine_tuned_model"] is None and job["error"] is None
    assert job["hyperparameters"] == {
        "n_epochs": 3,
        "batch_size": 1,
        "learning_rate_multiplier": 2.0,
    }
    assert job["estimated_finish"] == job["created_at"] + 35
    assert (job["training_file"], job["validation_file"], job["seed"]) == (file_id, None, 7)
    assert job["organization_id"] == "org-bench" and job["result_files"] == []
    seen = [job["status"]]
    for step in (10, 5, 20):
        mock_clock.jump(step)
        seen.append((await status(client, job["id"]))["status"])
    assert seen == ["queued", "validating_files", "running", "succeeded"]
    done = await status(client, job["id"])
    model = f"ft:sim-small-2024-07-18:bench:custom:{job['id'][6:14]}"
    assert done["fine_tuned_model"] == model
    assert done["trained_tokens"] == 27 * 3
    assert done["finished_at"] == job["created_at"] + 35 and done["estimated_finish"] is None
    assert upstream.fine_tuning.statistics() == {
        "uploads": 1,
        "jobs_created": 1,
        "cancels": 0,
        "models_deleted": 0,
    }

    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    r = await client.post("/v1/chat/completions", json=chat)
    assert r.status_code == 200 and r.json()["model"] == model
    r = await client.get(f"/v1/models/{model}")
    assert r.json() == {
        "id": model,
        "object": "model",
        "created": job["created_at"] + 35,
        "owned_by": "org-bench",
    }

    r = await client.delete(f"/v1/models/{model}")
    assert r.json() == {"id": model, "object": "model", "deleted": True}
    for call in (
        client.post("/v1/chat/completions", json=chat),
        client.delete(f"/v1/models/{model}"),
        client.get(f"/v1/models/{model}"),
    ):
        r = await call
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "model_not_found"
    assert upstream.fine_tuning.statistics()["models_deleted"] == 1


async def test_a_model_is_unknown_until_its_job_succeeds(
    client: httpx.AsyncClient, mock_clock: trio.testing.MockClock
) -> None:
    job = await create(client, training_file=await upload(client))
    model = f"ft:sim-small-2024-07-18:bench::{job['id'][6:14]}"
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    r = await client.post("/v1/chat/completions", json=chat)
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"
    mock_clock.jump(35)
    assert (await status(client, job["id"]))["fine_tuned_model"] == model
    assert (await client.post("/v1/chat/completions", json=chat)).status_code == 200


async def test_failure_on_demand_at_validation_and_while_running(
    upstream: UpstreamServer, client: httpx.AsyncClient, mock_clock: trio.testing.MockClock
) -> None:
    file_id = await upload(client)
    upstream.behavior.fine_tune_failure = (
        "token_limit_exceeded",
        "example 2 too long",
        "training_file",
    )
    early = await create(client, training_file=file_id)
    upstream.behavior.fine_tune_fail_while_running = True
    late = await create(client, training_file=file_id)
    upstream.behavior.fine_tune_failure = None
    fine = await create(client, training_file=file_id)  # knobs are fixed at creation
    mock_clock.jump(15)
    assert (await status(client, early["id"]))["error"] == {
        "code": "token_limit_exceeded",
        "message": "example 2 too long",
        "param": "training_file",
    }
    assert (await status(client, late["id"]))["status"] == "running"
    mock_clock.jump(20)
    failed = await status(client, late["id"])
    assert failed["status"] == "failed" and failed["fine_tuned_model"] is None
    assert failed["trained_tokens"] is None and failed["finished_at"] == late["created_at"] + 35
    assert (await status(client, fine["id"]))["status"] == "succeeded"


async def test_a_malformed_training_file_fails_validation_with_invalid_format(
    client: httpx.AsyncClient, mock_clock: trio.testing.MockClock
) -> None:
    for content in (LINE + b"{not json\n", b"\n\n", b'{"messages": "x"}\n', b"\xff\xfe"):
        job = await create(client, training_file=await upload(client, content))
        mock_clock.jump(14)
        assert (await status(client, job["id"]))["status"] == "validating_files"
        mock_clock.jump(1)
        failed = await status(client, job["id"])
        assert failed["status"] == "failed"
        assert failed["error"]["code"] == "invalid_format"
        assert failed["error"]["param"] == "training_file"


async def test_cancel_until_the_job_ends_then_400(
    upstream: UpstreamServer, client: httpx.AsyncClient, mock_clock: trio.testing.MockClock
) -> None:
    file_id = await upload(client)
    jobs = [await create(client, training_file=file_id) for _ in range(3)]
    r = await client.post(f"/v1/fine_tuning/jobs/{jobs[0]['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    mock_clock.jump(12)  # validating_files
    r = await client.post(f"/v1/fine_tuning/jobs/{jobs[1]['id']}/cancel")
    assert r.json()["status"] == "cancelled"
    assert r.json()["finished_at"] == jobs[1]["created_at"] + 12
    mock_clock.jump(100)
    assert (await status(client, jobs[1]["id"]))["status"] == "cancelled"
    r = await client.post(f"/v1/fine_tuning/jobs/{jobs[2]['id']}/cancel")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert (await status(client, jobs[2]["id"]))["status"] == "succeeded"
    assert upstream.fine_tuning.statistics()["cancels"] == 2


async def test_events_newest_first_paged(
    client: httpx.AsyncClient, mock_clock: trio.testing.MockClock
) -> None:
    job = await create(client, training_file=await upload(client), hyperparameters={"n_epochs": 2})
    path = f"/v1/fine_tuning/jobs/{job['id']}/events"
    first = (await client.get(path)).json()
    assert first["object"] == "list" and first["has_more"] is False
    assert [e["message"] for e in first["data"]] == [f"Created fine-tuning job: {job['id']}"]
    mock_clock.jump(35)
    events = (await client.get(path)).json()["data"]
    assert [e["message"] for e in events] == [
        "The job has successfully completed",
        "Epoch 1/2 completed",
        f"Fine-tuning job started: {job['id']}",
        f"Validating training file: {job['training_file']}",
        f"Created fine-tuning job: {job['id']}",
    ]
    event = events[-1]
    assert event["object"] == "fine_tuning.job.event" and event["type"] == "message"
    assert event["level"] == "info" and event["created_at"] == job["created_at"]
    assert [e["created_at"] - job["created_at"] for e in events] == [35, 25, 15, 10, 0]
    page = (await client.get(path, params={"limit": 2})).json()
    assert page["has_more"] is True and page["data"] == events[:2]
    rest = (await client.get(path, params={"limit": 10, "after": events[1]["id"]})).json()
    assert rest == {"object": "list", "data": events[2:], "has_more": False}


async def test_cancelled_and_failed_events(
    upstream: UpstreamServer, client: httpx.AsyncClient, mock_clock: trio.testing.MockClock
) -> None:
    file_id = await upload(client)
    cancelled = await create(client, training_file=file_id)
    upstream.behavior.fine_tune_failure = ("invalid_format", "bad line 3", "training_file")
    failed = await create(client, training_file=file_id)
    mock_clock.jump(11)
    await client.post(f"/v1/fine_tuning/jobs/{cancelled['id']}/cancel")
    mock_clock.jump(30)
    events = (await client.get(f"/v1/fine_tuning/jobs/{cancelled['id']}/events")).json()["data"]
    assert [e["message"] for e in events][:2] == [
        "The job was cancelled",
        f"Validating training file: {file_id}",
    ]
    events = (await client.get(f"/v1/fine_tuning/jobs/{failed['id']}/events")).json()["data"]
    assert (events[0]["level"], events[0]["message"]) == ("error", "bad line 3")


async def test_jobs_list_newest_first(client: httpx.AsyncClient) -> None:
    file_id = await upload(client)
    ids = [(await create(client, training_file=file_id))["id"] for _ in range(3)]
    listed = (await client.get("/v1/fine_tuning/jobs", params={"limit": 2})).json()
    assert [j["id"] for j in listed["data"]] == ids[:0:-1] and listed["has_more"] is True
    after = (await client.get("/v1/fine_tuning/jobs", params={"after": ids[1]})).json()
    assert [j["id"] for j in after["data"]] == [ids[0]] and after["has_more"] is False


async def test_files_get_and_delete(client: httpx.AsyncClient) -> None:
    file_id = await upload(client, purpose="batch")
    assert (await client.get(f"/v1/files/{file_id}")).json()["purpose"] == "batch"
    r = await client.delete(f"/v1/files/{file_id}")
    assert r.json() == {"id": file_id, "object": "file", "deleted": True}
    assert (await client.get(f"/v1/files/{file_id}")).status_code == 404
    r = await client.post("/v1/fine_tuning/jobs", json={"model": "m", "training_file": file_id})
    assert r.status_code == 400


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "training_file": "file-nope"}, "training_file"),
        ({"model": "m", "training_file": "BATCH"}, "training_file"),
        ({"model": "m", "training_file": "TRAIN", "validation_file": "x"}, "validation_file"),
        ({"model": "m", "training_file": "TRAIN", "suffix": "a:b"}, "suffix"),
        ({"model": "m", "training_file": "TRAIN", "suffix": "x" * 65}, "suffix"),
        ({"model": "", "training_file": "TRAIN"}, "model"),
        ({"model": "a b", "training_file": "TRAIN"}, "model"),
        ({"model": "m", "training_file": "TRAIN", "seed": -1}, "seed"),
        (
            {"model": "m", "training_file": "TRAIN", "hyperparameters": {"n_epochs": 0}},
            "hyperparameters.n_epochs",
        ),
        (
            {"model": "m", "training_file": "TRAIN", "hyperparameters": {"batch_size": 10**6}},
            "hyperparameters.batch_size",
        ),
        (
            {
                "model": "m",
                "training_file": "TRAIN",
                "hyperparameters": {"learning_rate_multiplier": 0},
            },
            "hyperparameters.learning_rate_multiplier",
        ),
    ],
)
async def test_invalid_job_bodies_are_400(
    upstream: UpstreamServer, client: httpx.AsyncClient, body: dict[str, Any], param: str
) -> None:
    names = {"TRAIN": await upload(client), "BATCH": await upload(client, purpose="batch")}
    body = {k: names.get(v, v) if isinstance(v, str) else v for k, v in body.items()}
    r = await client.post("/v1/fine_tuning/jobs", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert upstream.fine_tuning.statistics()["jobs_created"] == 0


async def test_hostile_requests_are_answered_not_raised(
    upstream: UpstreamServer, client: httpx.AsyncClient
) -> None:
    raw_bodies = [
        b"",
        b"{",
        b"[]",
        b'{"model": 1, "training_file": "x"}',
        b'{"model": "m", "training_file": "x", "hyperparameters": {"n_epochs": true}}',
        b'{"model": "m", "training_file": "x", "seed": 1e400}',
        b'{"model": "m", "training_file": "x", "seed": 99999999999999999999999}',
        b'{"model": "m", "training_file": "x", "hyperparameters": {"n_epochs": "many"}}',
    ]
    for raw in raw_bodies:
        r = await client.post("/v1/fine_tuning/jobs", content=raw)
        assert r.status_code == 400, raw
    for headers, content in (
        ({"content-type": "multipart/form-data"}, b"x"),
        ({"content-type": "multipart/form-data; boundary=b"}, b"--b\r\ntruncated"),
        ({"content-type": "application/json"}, b"{}"),
    ):
        r = await client.post("/v1/files", content=content, headers=headers)
        assert r.status_code == 400
    r = await client.post("/v1/files", data={"purpose": "nonsense"}, files={"file": ("a", b"x")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "purpose"
    r = await client.post("/v1/files", data={"purpose": "fine-tune"})
    assert r.status_code == 400
    for path in (
        "/v1/fine_tuning/jobs/nope",
        "/v1/fine_tuning/jobs/nope/events",
        "/v1/fine_tuning/jobs/%00%ff/events",
        "/v1/fine_tuning/other",
        "/v1/models/ft:nope",
        "/v1/models/" + "ft:" + "x" * 5000,
    ):
        assert (await client.get(path)).status_code == 404, path
    assert (await client.post("/v1/fine_tuning/jobs/nope/cancel")).status_code == 404
    assert (await client.post("/v1/fine_tuning/jobs/x/retry")).status_code == 404
    r = await client.put("/v1/fine_tuning/jobs")
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    for query in ("limit=0", "limit=101", "limit=x", "limit=%EF%BC%91", "limit=1e3"):
        r = await client.get(f"/v1/fine_tuning/jobs?{query}")
        assert r.status_code == 400, query
    r = await client.get("/v1/fine_tuning/jobs?" + "&".join(f"a{i}=1" for i in range(50)))
    assert r.status_code == 400
    r = await client.delete("/v1/models/sim-small")
    assert r.status_code == 403
    async with httpx.AsyncClient(base_url=upstream.url) as anonymous:
        assert (await anonymous.get("/v1/fine_tuning/jobs")).status_code == 401
        assert (await anonymous.post("/v1/files")).status_code == 401
        chat = {"model": "ft:made-up", "messages": [{"role": "user", "content": "x"}]}
        assert (await anonymous.post("/v1/chat/completions", json=chat)).status_code == 401
    chat = {"model": "ft:made-up", "messages": [{"role": "user", "content": "x"}]}
    assert (await client.post("/v1/chat/completions", json=chat)).status_code == 404
    r = await client.post("/v1/chat/completions", content=b'{"model": "ft:x", ')
    assert r.status_code == 400
    assert upstream.fine_tuning.statistics()["jobs_created"] == 0


def test_dataset_tokens_count_like_chat_prompts() -> None:
    assert dataset_tokens(TRAINING) == 27
    assert dataset_tokens(LINE + b"\n  \n" + LINE) == 18
    assert isinstance(dataset_tokens(b'{"messages": [{"content": "x"}]}'), str)
    assert isinstance(dataset_tokens(b'{"messages": [{"role": "user", "content": 3}]}'), str)
    assert msgspec.json.decode(LINE)["messages"][0]["content"] == "hi there"
