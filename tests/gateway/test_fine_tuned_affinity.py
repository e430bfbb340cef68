"""A fine-tuned model is called only with the key whose provider account trained it (it exists
nowhere else): trained with the organization's own key, only that key (400
`provider_key_required` once it is gone); trained with the gateway's, the gateway's key even
when the organization has its own key for the provider now."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from storage.fine_tuning import NO_BILLING, Note
from tests.gateway.keys_client import error_of
from tests.gateway.test_fine_tuned_models import MESSAGES, train_upstream
from tests.inference import UPSTREAM_KEY, Rig, inference_rig
from tests.storage.test_fine_tuning import new_job

ORG_KEY = "sk-org-own-sim-key-0123456789"


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        r.upstream.behavior.fine_tune_schedule_s = (0.0, 0.0, 0.0)
        yield r


async def _trained(rig: Rig, *, own_key: bool) -> str:
    """An `ft:` model of the org whose job ran with its own key (or the gateway's)."""
    storage = rig.gateway.runtime.storage
    org_id = rig.gateway.org_id
    job = replace(new_job(org_id, hold=0), byok=own_key, billing=NO_BILLING)
    await storage.fine_tuning.create(job, Note("made"), description="test job")
    name = f"ft:sim-small:{org_id}:custom:{job.id}"
    await storage.fine_tuned_models.register(
        model_id=name,
        org_id=org_id,
        provider="sim",
        upstream_model=await train_upstream(rig),
        base_model="small",
        job_id=job.id,
        created_at_us=job.created_at,
    )
    return name


async def _add_own_key(rig: Rig) -> str:
    gw = rig.gateway
    r = await gw.client.post(
        "/v1/provider_keys", json={"provider": "sim", "api_key": ORG_KEY}, headers=gw.auth()
    )
    assert r.status_code in (200, 201), r.text
    return str(r.json()["id"])


def _last_key_upstream(rig: Rig) -> str:
    chats = [r for r in rig.upstream.requests if r.path == "/v1/chat/completions"]
    return chats[-1].headers["authorization"].removeprefix("Bearer ")


async def test_a_model_trained_with_the_orgs_key_is_called_with_it_only(rig: Rig) -> None:
    name = await _trained(rig, own_key=True)
    r = await rig.chat({"model": name, "messages": MESSAGES})
    assert r.status_code == 400
    error = error_of(r)
    assert (error["code"], error["param"]) == ("provider_key_required", "model")
    assert "POST /v1/provider_keys" in error["message"]
    assert not [q for q in rig.upstream.requests if q.path == "/v1/chat/completions"]
    await _add_own_key(rig)
    r = await rig.chat({"model": name, "messages": MESSAGES})
    assert r.status_code == 200, r.text
    assert _last_key_upstream(rig) == ORG_KEY


async def test_a_model_trained_with_the_gateways_key_keeps_it(rig: Rig) -> None:
    name = await _trained(rig, own_key=False)
    await _add_own_key(rig)  # the org's key for the provider cannot reach this model
    r = await rig.chat({"model": name, "messages": MESSAGES})
    assert r.status_code == 200, r.text
    assert _last_key_upstream(rig) == UPSTREAM_KEY
    r = await rig.chat({"model": "small", "messages": MESSAGES})
    assert r.status_code == 200 and _last_key_upstream(rig) == ORG_KEY  # other models: its own


async def test_the_repository_says_which_key_trained_a_model(rig: Rig) -> None:
    storage = rig.gateway.runtime.storage
    org_id = rig.gateway.org_id
    own = await _trained(rig, own_key=True)
    gateways = await _trained(rig, own_key=False)
    got_own = await storage.fine_tuned_models.get(org_id, own)
    got_gateways = await storage.fine_tuned_models.get(org_id, gateways)
    assert got_own is not None and got_own.own_key is True
    assert got_gateways is not None and got_gateways.own_key is False
