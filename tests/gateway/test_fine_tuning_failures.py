"""Fine-tuning jobs that fail or are cancelled: our own dataset check (nothing reaches the
provider), a provider's failure mapped through, cancel at each stage, and the hold released
exactly; over real HTTP on both backends, a MockClock driving the watcher."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio.testing

from tests.gateway.fine_tuning_rig import (
    BASE,
    GOOD_LINE,
    create,
    dataset,
    drive,
    ft_rig,
    ft_watcher,
    hold_for,
    job,
    job_rows,
    outbox,
    status_is,
    upload,
    upstream_calls,
)
from tests.harness import Gateway
from tests.inference import Rig, ledger

pytestmark = pytest.mark.storage


async def fine_tune_file_unchecked(gw: Gateway, key: str, content: bytes) -> str:
    """A `fine-tune` file whose content the upload did not check: one stored before today's
    line rules (uploaded as user_data, then re-labelled in the database)."""
    file_id = await upload(gw, key, content, purpose="user_data")
    await gw.runtime.storage.db.execute(
        "UPDATE files SET purpose = 'fine-tune' WHERE id = :id", {"id": file_id}
    )
    return file_id


async def run_to_end(rig: Rig, clock: trio.testing.MockClock, job_id: str) -> dict[str, object]:
    gw = rig.gateway
    await drive(clock, [ft_watcher(gw)], status_is(gw, rig.key, job_id, "failed", "succeeded"))
    return await job(gw, rig.key, job_id)


async def assert_released(rig: Rig, job_id: str, hold: int) -> None:
    balance, _ = await ledger(rig)
    assert balance == 100_000_000
    assert await job_rows(rig.gateway, job_id) == sorted(
        [(f"txn_{job_id}_hold", "usage", -hold), (f"txn_{job_id}_release", "refund", hold)]
    )


async def test_a_malformed_line_fails_the_job_before_anything_is_sent(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        content = GOOD_LINE + b'\n{"messages": [{"role": "user", "content": "no answer"}]}\n'
        file_id = await fine_tune_file_unchecked(gw, key, content)
        r = await create(gw, key, model=BASE, training_file=file_id)
        assert r.status_code == 200, r.text
        job_id = r.json()["id"]
        done = await run_to_end(rig, mock_clock, job_id)
        assert done["status"] == "failed"
        assert done["error"] == {
            "code": "invalid_format",
            "message": "training_file: line 2: messages has no assistant message",
            "param": "training_file",
        }
        assert done["fine_tuned_model"] is None
        assert not [r for r in rig.upstream.requests if "fine_tuning" in r.path]
        assert upstream_calls(rig.upstream, "POST", "/v1/files") == 0
        await assert_released(rig, job_id, hold_for(content))
        [(kind, data)] = await outbox(gw)
        assert kind == "fine_tuning.job.failed"
        assert data["job_id"] == job_id
        assert data["error"]["code"] == "invalid_format"


async def test_not_json_and_not_chat_format_are_invalid_format(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        cases = {
            b"not json at all\n": "line 1: not valid JSON",
            GOOD_LINE + b'\n{"prompt": "x", "completion": "y"}\n': "line 2: messages is missing",
        }
        for content, message in cases.items():
            file_id = await fine_tune_file_unchecked(gw, key, content)
            r = await create(gw, key, model=BASE, training_file=file_id)
            done = await run_to_end(rig, mock_clock, r.json()["id"])
            assert done["error"] == {
                "code": "invalid_format",
                "message": f"training_file: {message}",
                "param": "training_file",
            }
        assert upstream_calls(rig.upstream, "POST", "/v1/files") == 0


async def test_an_example_over_the_token_limit_fails_with_token_limit_exceeded(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:  # max_example_tokens = 1000
        gw, key = rig.gateway, rig.key
        long = (
            b'{"messages":[{"role":"user","content":"'
            + b"x" * 4000
            + b'"},{"role":"assistant","content":"ok"}]}'
        )
        content = GOOD_LINE + b"\n" + long + b"\n"
        file_id = await upload(gw, key, content)  # a valid file: the upload accepts it
        r = await create(gw, key, model=BASE, training_file=file_id)
        done = await run_to_end(rig, mock_clock, r.json()["id"])
        error = done["error"]
        assert isinstance(error, dict)
        assert error["code"] == "token_limit_exceeded"
        assert error["param"] == "training_file"
        assert "line 2" in error["message"]
        assert upstream_calls(rig.upstream, "POST", "/v1/files") == 0


async def test_a_bad_validation_file_fails_the_job_naming_it(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        training = await upload(gw, key, dataset(3))
        validation = await fine_tune_file_unchecked(gw, key, b"{}\n")
        r = await create(gw, key, model=BASE, training_file=training, validation_file=validation)
        done = await run_to_end(rig, mock_clock, r.json()["id"])
        error = done["error"]
        assert isinstance(error, dict)
        assert (error["code"], error["param"]) == ("invalid_format", "validation_file")
        assert upstream_calls(rig.upstream, "POST", "/v1/files") == 0


async def test_a_provider_failure_is_mapped_through(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        rig.upstream.behavior.fine_tune_failure = (
            "invalid_training_data",
            "The provider found duplicated examples.",
            "training_file",
        )
        rig.upstream.behavior.fine_tune_fail_while_running = True
        content = dataset(4)
        file_id = await upload(gw, key, content)
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        done = await run_to_end(rig, mock_clock, job_id)
        assert done["status"] == "failed"
        assert done["error"] == {
            "code": "invalid_training_data",
            "message": "The provider found duplicated examples.",
            "param": "training_file",
        }
        assert upstream_calls(rig.upstream, "POST", "/v1/fine_tuning/jobs") == 1
        r = await gw.client.get(f"/v1/fine_tuning/jobs/{job_id}/events", headers=gw.auth(key))
        levels = [(e["level"], e["message"]) for e in r.json()["data"]]
        assert levels[0] == ("error", "The job failed: The provider found duplicated examples.")
        assert ("info", "Fine-tuning job started") in levels
        await assert_released(rig, job_id, hold_for(content))
        assert [kind for kind, _ in await outbox(gw)] == ["fine_tuning.job.failed"]


async def test_cancel_a_queued_job_releases_the_hold_and_sends_nothing(
    database_url: str, tmp_path: Path
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        await gw.runtime.supervisor.stop("fine_tuning_watcher")  # nobody picks the job up
        content = dataset(5)
        file_id = await upload(gw, key, content)
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        r = await gw.client.post(f"/v1/fine_tuning/jobs/{job_id}/cancel", headers=gw.auth(key))
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "cancelled"
        assert (await job(gw, key, job_id))["status"] == "cancelled"
        await assert_released(rig, job_id, hold_for(content))
        again = await gw.client.post(f"/v1/fine_tuning/jobs/{job_id}/cancel", headers=gw.auth(key))
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "job_not_cancellable"
        await assert_released(rig, job_id, hold_for(content))  # refunded once
        assert not [r for r in rig.upstream.requests if "fine_tuning" in r.path]
        assert await outbox(gw) == []  # no webhook type for a cancel


async def test_cancel_a_running_job_cancels_it_at_the_provider(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        watcher = ft_watcher(gw)
        content = dataset(5)
        file_id = await upload(gw, key, content)
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        await drive(mock_clock, [watcher], status_is(gw, key, job_id, "running"))
        r = await gw.client.post(f"/v1/fine_tuning/jobs/{job_id}/cancel", headers=gw.auth(key))
        assert r.status_code == 200 and r.json()["status"] == "cancelled"

        async def provider_told() -> bool:
            return any(r.path.endswith("/cancel") for r in rig.upstream.requests)

        await drive(mock_clock, [watcher], provider_told)
        [provider_job] = rig.upstream.fine_tuning.jobs.values()
        assert provider_job.status(trio.current_time()) == "cancelled"

        async def settled() -> bool:
            return not watcher.watching

        await drive(mock_clock, [watcher], settled)
        # The watcher stopped: the job stays cancelled however long the clock runs.
        mock_clock.jump(20)  # (past several polls; under the keep-alive timeout)
        assert (await job(gw, key, job_id))["status"] == "cancelled"
        await assert_released(rig, job_id, hold_for(content))
        assert upstream_calls(rig.upstream, "POST", "/v1/fine_tuning/jobs") == 1


async def test_a_finished_job_cannot_be_cancelled(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        file_id = await upload(gw, key, dataset(2))
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        await drive(mock_clock, [ft_watcher(gw)], status_is(gw, key, job_id, "succeeded"))
        balance, _ = await ledger(rig)
        r = await gw.client.post(f"/v1/fine_tuning/jobs/{job_id}/cancel", headers=gw.auth(key))
        assert r.status_code == 409
        assert "succeeded" in r.json()["error"]["message"]
        assert (await job(gw, key, job_id))["status"] == "succeeded"
        assert (await ledger(rig))[0] == balance


async def test_provider_outages_are_retried_with_backoff(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        watcher = ft_watcher(gw)
        rig.upstream.behavior.fail_status = 503
        file_id = await upload(gw, key, dataset(2))
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        start = trio.current_time()

        async def a_minute_passed() -> bool:
            return trio.current_time() - start >= 60

        await drive(mock_clock, [watcher], a_minute_passed)
        attempts = upstream_calls(rig.upstream, "POST", "/v1/files")
        # 1 + 2 + 4 + 8 + 8 ... seconds apart (poll_max_s = 8): about ten in a minute.
        assert 5 <= attempts <= 12, attempts
        assert (await job(gw, key, job_id))["status"] == "validating_files"
        rig.upstream.behavior.fail_status = None
        await drive(mock_clock, [watcher], status_is(gw, key, job_id, "succeeded"))
        assert upstream_calls(rig.upstream, "POST", "/v1/fine_tuning/jobs") == 1


async def test_a_provider_job_that_disappears_fails_the_job(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        content = dataset(2)
        file_id = await upload(gw, key, content)
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        await drive(mock_clock, [ft_watcher(gw)], status_is(gw, key, job_id, "running"))
        rig.upstream.fine_tuning.jobs.clear()  # the provider forgot it
        done = await run_to_end(rig, mock_clock, job_id)
        assert done["status"] == "failed"
        error = done["error"]
        assert isinstance(error, dict) and error["code"] == "provider_job_not_found"
        await assert_released(rig, job_id, hold_for(content))


async def test_a_provider_refusal_fails_the_job_with_its_error(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        rig.upstream.behavior.fail_status = 400
        content = dataset(2)
        file_id = await upload(gw, key, content)
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        done = await run_to_end(rig, mock_clock, job_id)
        error = done["error"]
        assert isinstance(error, dict) and error["code"]  # the provider's code, not ours
        assert error["code"] not in ("invalid_format", "token_limit_exceeded")
        assert upstream_calls(rig.upstream, "POST", "/v1/files") == 1  # no retry of a 400
        await assert_released(rig, job_id, hold_for(content))


async def test_a_training_file_deleted_before_the_watcher_reads_it_fails_the_job(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        watcher = ft_watcher(gw)
        await gw.runtime.supervisor.stop(watcher.name)
        content = dataset(2)
        file_id = await upload(gw, key, content)
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]
        r = await gw.client.delete(f"/v1/files/{file_id}", headers=gw.auth(key))
        assert r.status_code == 200, r.text
        await gw.runtime.supervisor.start(watcher)
        done = await run_to_end(rig, mock_clock, job_id)
        error = done["error"]
        assert isinstance(error, dict)
        assert (error["code"], error["param"]) == ("file_not_found", "training_file")
        assert upstream_calls(rig.upstream, "POST", "/v1/files") == 0
        await assert_released(rig, job_id, hold_for(content))


def flip_a_byte(root: Path, file_id: str) -> None:
    """Damage a stored blob in place (same size: found only when its chunk is opened)."""
    [blob] = [p for p in root.rglob(file_id) if p.is_file()]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))


async def test_a_file_found_corrupt_while_uploading_fails_the_job(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        watcher = ft_watcher(gw)
        rig.upstream.behavior.fail_status = 503  # uploads fail: the job waits after validation
        content = dataset(2)
        file_id = await upload(gw, key, content)
        job_id = (await create(gw, key, model=BASE, training_file=file_id)).json()["id"]

        async def upload_refused() -> bool:
            """Validated, and an upload refused 503 with the watcher asleep before its retry:
            no upload is in flight while the byte is flipped and the provider comes back (one
            in flight would have read the blob before the flip, and the provider, answering
            at its body's end, could accept it)."""
            stored = await gw.runtime.storage.fine_tuning.by_id(job_id)
            validated = stored is not None and stored.dataset_tokens is not None
            refused = upstream_calls(rig.upstream, "POST", "/v1/files") >= 1
            return validated and refused and watcher.asleep_until is not None

        await drive(mock_clock, [watcher], upload_refused)
        await trio.to_thread.run_sync(flip_a_byte, tmp_path, file_id)
        rig.upstream.behavior.fail_status = None
        done = await run_to_end(rig, mock_clock, job_id)
        error = done["error"]
        assert isinstance(error, dict)
        assert (error["code"], error["param"]) == ("file_corrupt", "training_file")
        assert upstream_calls(rig.upstream, "POST", "/v1/fine_tuning/jobs") == 0
        await assert_released(rig, job_id, hold_for(content))
