"""A secret key's limits apply to fine-tuning as to inference (issue #19, items 8 and 9), over
real HTTP on every backend: `allowed_models` on the base model of a job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gateway.fine_tuning_rig import BASE, create, dataset, ft_rig, upload
from tests.gateway.keys_client import create_key, error_of

pytestmark = pytest.mark.storage


async def test_a_base_model_outside_allowed_models_is_403(
    database_url: str, tmp_path: Path
) -> None:
    async with ft_rig(database_url, tmp_path) as rig:
        gw = rig.gateway
        await gw.runtime.supervisor.stop("fine_tuning_watcher")
        limited = await create_key(gw, name="mini only", allowed_models=["small"])
        file_id = await upload(gw, limited["key"], dataset(2))
        r = await create(gw, limited["key"], model=BASE, training_file=file_id)
        assert r.status_code == 403, r.text
        error = error_of(r)
        assert (error["type"], error["code"], error["param"]) == (
            "permission_error",
            "model_not_allowed",
            "model",
        )
        listed = await gw.client.get("/v1/fine_tuning/jobs", headers=gw.auth())
        assert listed.json()["data"] == []
        rows, _ = await gw.runtime.storage.ledger.list(gw.org_id, limit=50, offset=0)
        assert all(t.type != "usage" for t in rows)  # no training hold was taken
        allowed = await create_key(gw, name="trainer", allowed_models=[BASE])
        file_id = await upload(gw, allowed["key"], dataset(2))
        r = await create(gw, allowed["key"], model=BASE, training_file=file_id)
        assert r.status_code == 200, r.text
