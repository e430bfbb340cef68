"""Fine-tuning jobs end to end over real HTTP: the gateway, its job watcher and the simulated
provider (bench/upstream/fine_tuning_routes.py), on both backends, with a MockClock moving the
provider's schedule, the polls and the leases."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio.testing

from tests.gateway.fine_tuning_rig import (
    BASE,
    GOOD_LINE_TOKENS,
    UPSTREAM_BASE,
    create,
    dataset,
    drive,
    ft_rig,
    ft_watcher,
    hold_for,
    job,
    micros,
    status_is,
    upload,
    upstream_calls,
)
from tests.inference import ledger

pytestmark = pytest.mark.storage


async def test_a_job_runs_to_success_and_is_billed_exactly(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        content = dataset(10)
        file_id = await upload(gw, key, content)
        r = await create(gw, key, model=BASE, training_file=file_id, suffix="pets", seed=7)
        assert r.status_code == 200, r.text
        created = r.json()
        job_id = created["id"]
        assert job_id.startswith("ftjob_")
        assert created["object"] == "fine_tuning.job"
        assert created["status"] == "queued"
        assert created["hyperparameters"] == {
            "n_epochs": 3,
            "batch_size": 1,
            "learning_rate_multiplier": 2.0,
        }
        assert created["fine_tuned_model"] is None
        assert created["estimated_finish"] > created["created_at"]
        assert created["seed"] == 7 and created["suffix"] == "pets"
        hold = hold_for(content)
        balance, _ = await ledger(rig)
        assert balance == 100_000_000 - hold

        watcher = ft_watcher(gw)
        await drive(mock_clock, [watcher], status_is(gw, key, job_id, "succeeded"))
        done = await job(gw, key, job_id)
        model = f"ft:{BASE}:{gw.org_id}:pets:{job_id.removeprefix('ftjob_')}"
        assert done["fine_tuned_model"] == model
        assert done["trained_tokens"] == 10 * GOOD_LINE_TOKENS * 3
        assert done["error"] is None
        assert done["finished_at"] is not None

        # What the provider saw: one upload, one job, with the effective hyperparameters.
        assert upstream_calls(rig.upstream, "POST", "/v1/files") == 1
        assert upstream_calls(rig.upstream, "POST", "/v1/fine_tuning/jobs") == 1
        sent = next(r for r in rig.upstream.requests if r.path == "/v1/fine_tuning/jobs")
        assert b'"model":"' + UPSTREAM_BASE.encode() + b'"' in sent.body
        assert b'"n_epochs":3' in sent.body and b'"seed":7' in sent.body

        # The model is registered for the org, mapped to the provider's model.
        registered = await gw.runtime.storage.fine_tuned_models.get(gw.org_id, model)
        assert registered is not None
        assert registered.upstream_model.startswith("ft:")

        # Every state, in order, once.
        r = await gw.client.get(f"/v1/fine_tuning/jobs/{job_id}/events", headers=gw.auth(key))
        messages = [e["message"] for e in reversed(r.json()["data"])]
        assert messages[0] == f"Created fine-tuning job: {job_id}"
        assert messages[1:3] == ["Validating training file", "Fine-tuning job started"]
        assert messages[3].startswith("The job has successfully completed")
        assert len(messages) == 4

        # Billing: the hold, then the refund of what it held beyond the charge.
        charge = micros(10 * GOOD_LINE_TOKENS)
        balance, usage = await ledger(rig)
        assert balance == 100_000_000 - charge
        rows, _ = await gw.runtime.storage.ledger.list(gw.org_id, limit=10, offset=0)
        mine = [(t.id, t.type, t.amount_micros) for t in rows if job_id in t.id]
        assert sorted(mine) == sorted(
            [
                (f"txn_{job_id}_hold", "usage", -hold),
                (f"txn_{job_id}_settle", "refund", hold - charge),
            ]
        )

        # The webhook outbox has the succeeded event.
        evts = await gw.runtime.storage.db.fetch(
            "SELECT type, data FROM events WHERE org_id = :org AND type LIKE 'fine_tuning%'",
            {"org": gw.org_id},
        )
        assert [e["type"] for e in evts] == ["fine_tuning.job.succeeded"]
        assert model in evts[0]["data"]


async def test_with_the_orgs_own_provider_key_nothing_is_held_or_charged(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path, credit_usd=None) as rig:  # a zero balance
        gw, key = rig.gateway, rig.key
        own = "sk-org-own-provider-key"
        r = await gw.client.post(
            "/v1/provider_keys", json={"provider": "sim", "api_key": own}, headers=gw.auth()
        )
        assert r.status_code in (200, 201), r.text
        file_id = await upload(gw, key, dataset(3))
        # Even an unpriced base model: the provider bills the organization itself.
        for model in (BASE, "unpriced-2024-07-18"):
            r = await create(gw, key, model=model, training_file=file_id)
            assert r.status_code == 200, r.text
            job_id = r.json()["id"]
            await drive(mock_clock, [ft_watcher(gw)], status_is(gw, key, job_id, "succeeded"))
        sent = [
            r for r in rig.upstream.requests if "fine_tuning" in r.path or r.path == "/v1/files"
        ]
        assert sent and all(r.headers["authorization"] == f"Bearer {own}" for r in sent)
        assert await gw.runtime.storage.ledger.sum_rows(gw.org_id) == 0


async def test_the_trained_model_answers_chat_completions(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw, key = rig.gateway, rig.key
        file_id = await upload(gw, key, dataset(3))
        job_id = (await create(gw, key, model=BASE, training_file=file_id, suffix="bot")).json()[
            "id"
        ]
        await drive(mock_clock, [ft_watcher(gw)], status_is(gw, key, job_id, "succeeded"))
        model = (await job(gw, key, job_id))["fine_tuned_model"]
        r = await rig.chat({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"]
        sent = [r for r in rig.upstream.requests if r.path == "/v1/chat/completions"]
        provider_model = await gw.runtime.storage.fine_tuned_models.get(gw.org_id, model)
        assert provider_model is not None
        assert f'"model":"{provider_model.upstream_model}"'.encode() in sent[-1].body


async def test_the_hold_is_seen_at_once_by_inference_billing(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with ft_rig(database_url, tmp_path, credit_usd=5.0) as rig:
        gw, key = rig.gateway, rig.key
        await gw.runtime.supervisor.stop("fine_tuning_watcher")
        chat = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
        assert (await rig.chat({**chat, "max_tokens": 5})).status_code == 200  # a warm view
        content = dataset(10)  # 850 bytes: 213 tokens x 3 x $10,000/M x 1.04 = $6.6456
        file_id = await upload(gw, key, content)
        r = await create(gw, key, model="pricey-2024-07-18", training_file=file_id)
        assert r.status_code == 402  # more than the balance
        small = await upload(gw, key, dataset(6))  # 510 bytes: 128 tokens: $3.9936
        r = await create(gw, key, model="pricey-2024-07-18", training_file=small)
        assert r.status_code == 200, r.text
        # What is left (about $1) cannot hold a request that may cost $1.5 (the clock has not
        # moved: only being told of the hold makes the accountant see it).
        r = await rig.chat({**chat, "max_tokens": 1_000_000})
        assert r.status_code == 402, r.text
        assert r.json()["error"]["code"] == "insufficient_credits"
