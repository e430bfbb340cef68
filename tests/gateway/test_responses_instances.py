"""Two gateway instances on one database: a response created on one is retrieved and continued
on the other at once (the row is committed before the create is answered)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.backends import REDIS_URL
from tests.inference import two_instances


@pytest.mark.skipif(REDIS_URL is None, reason="needs GATEWAY_TEST_REDIS_URL")
@pytest.mark.parametrize("stream", [False, True])
async def test_created_on_one_continued_on_the_other(
    database_url: str, tmp_path: Path, stream: bool
) -> None:
    assert REDIS_URL is not None
    async with two_instances(database_url, tmp_path, REDIS_URL) as (a, b):
        await a.client.post("/v1/credits/topup", json={"amount_usd": 10}, headers=a.auth())
        key = (await a.client.post("/v1/keys", json={"name": "k"}, headers=a.auth())).json()["key"]
        headers = a.auth(key)
        for model in ("small", "haiku"):
            first = await a.client.post(
                "/v1/responses",
                json={"model": model, "input": "on a", "stream": stream},
                headers=headers,
            )
            assert first.status_code == 200, first.text
            rid = (
                first.json()["id"]
                if not stream
                else first.text.split('"id":"', 1)[1].split('"', 1)[0]
            )
            assert rid.startswith("resp_")
            got = await b.client.get(f"/v1/responses/{rid}", headers=headers)
            assert got.status_code == 200 and got.json()["id"] == rid
            follow = await b.client.post(
                "/v1/responses",
                json={"model": model, "input": "on b", "previous_response_id": rid},
                headers=headers,
            )
            assert follow.status_code == 200, follow.text
            items = await b.client.get(
                f"/v1/responses/{follow.json()['id']}/input_items?order=asc", headers=headers
            )
            texts = [i["content"][0]["text"] for i in items.json()["data"]]
            assert texts[0] == "on a" and texts[-1] == "on b" and len(texts) == 3
