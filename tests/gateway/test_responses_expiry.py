"""30-day retention over real HTTP, driven by Trio time: the gateway's wall clock for responses
moves with a MockClock (actors/webhooks/clock.py WallClock), so jumping it 30 days expires a
response at once (GET 404, continuation 400 `previous_response_not_found`), and the janitor
then deletes the row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio.testing

from actors.responses_janitor import ResponsesJanitor
from gateway.responses.area import ResponsesArea
from tests.gateway.responses_rig import create, error_of
from tests.inference import Rig, inference_rig

DAY_S = 86_400


async def call(rig: Rig, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """On a new connection: a jump of the clock lets the server close idle ones."""
    async with httpx.AsyncClient(base_url=rig.gateway.url, timeout=30) as client:
        headers = rig.gateway.auth(rig.key)
        return await client.request(method, path, headers=headers, **kwargs)


async def test_a_response_expires_after_30_days_and_the_janitor_removes_it(
    database_url: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    async with inference_rig(database_url, tmp_path) as rig:
        r = await create(rig, {"model": "small", "input": "remember this"})
        rid = r.json()["id"]
        runtime = rig.gateway.runtime
        janitor = ResponsesJanitor(
            runtime.storage.responses, runtime.area(ResponsesArea).store.clock
        )
        mock_clock.jump(30 * DAY_S - 60)
        assert (await call(rig, "GET", f"/v1/responses/{rid}")).status_code == 200
        assert await janitor.sweep_once() == 0
        mock_clock.jump(60)
        assert (await call(rig, "GET", f"/v1/responses/{rid}")).status_code == 404
        assert (await call(rig, "GET", f"/v1/responses/{rid}/input_items")).status_code == 404
        body = {"model": "small", "input": "x", "previous_response_id": rid}
        follow = await call(rig, "POST", "/v1/responses", json=body)
        assert follow.status_code == 400
        assert error_of(follow)["code"] == "previous_response_not_found"
        assert await runtime.storage.responses.count() == 1  # hidden at once, deleted later
        assert await janitor.sweep_once() == 1
        assert await runtime.storage.responses.count() == 0
