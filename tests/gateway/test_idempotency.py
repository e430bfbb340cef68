"""`metadata.idempotency_key` on chat completions, over HTTP, on every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.gateway.keys_client import error_of
from tests.inference import Rig, inference_rig

MESSAGES = [{"role": "user", "content": "charge me once"}]


def body(key: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "small",
        "messages": MESSAGES,
        "max_tokens": 3,
        "metadata": {"idempotency_key": key, "team": "a"},
        **extra,
    }


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


async def test_a_retry_replays_the_first_answer_without_a_second_call(rig: Rig) -> None:
    first = await rig.chat(body("k1"))
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    again = await rig.chat(body("k1"))
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert len(rig.upstream.requests) == 1
    # The key is the gateway's: the upstream does not see it; other metadata passes.
    assert rig.upstream.requests[0].json()["metadata"] == {"team": "a"}


async def test_the_same_key_with_another_body_is_409(rig: Rig) -> None:
    assert (await rig.chat(body("k2"))).status_code == 200
    r = await rig.chat(body("k2", max_tokens=4))
    assert r.status_code == 409 and error_of(r)["code"] == "idempotency_key_reused"


async def test_a_streamed_request_is_not_replayed(rig: Rig) -> None:
    assert (await rig.chat(body("k3", stream=True))).status_code == 200
    r = await rig.chat(body("k3", stream=True))
    assert r.status_code == 409 and error_of(r)["code"] == "idempotency_key_reused"
    assert len(rig.upstream.requests) == 1


async def test_a_failed_request_releases_its_key(rig: Rig) -> None:
    rig.upstream.behavior.fail_status = 500
    assert (await rig.chat(body("k4"))).status_code == 502
    rig.upstream.behavior.fail_status = None
    assert (await rig.chat(body("k4"))).status_code == 200
    assert len(rig.upstream.requests) == 2


async def test_a_duplicate_while_the_first_runs_is_409(rig: Rig) -> None:
    rig.upstream.behavior.latency_s = 0.5
    statuses: list[int] = []

    async def send() -> None:
        statuses.append((await rig.chat(body("k5"))).status_code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        await trio.sleep(0.2)
        nursery.start_soon(send)
    assert sorted(statuses) == [200, 409]
    assert len(rig.upstream.requests) == 1


async def test_keys_belong_to_one_organization(rig: Rig) -> None:
    from protocol.credentials import CredentialKind

    runtime = rig.gateway.runtime
    other = await runtime.storage.orgs.create("other-org")
    mgmt = runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await runtime.storage.orgs.add_management_key(other.id, mgmt)
    await runtime.storage.ledger.apply(other.id, "adjustment", 1_000_000, "test credit")
    key = (
        await rig.gateway.client.post(
            "/v1/keys", json={"name": "o"}, headers=rig.gateway.auth(mgmt.value)
        )
    ).json()["key"]
    assert (await rig.chat(body("shared"))).status_code == 200
    r = await rig.chat(body("shared"), key=key)
    assert r.status_code == 200 and "idempotent-replayed" not in r.headers
    assert len(rig.upstream.requests) == 2


async def test_an_empty_key_is_400(rig: Rig) -> None:
    r = await rig.chat(body(""))
    assert r.status_code == 400 and error_of(r)["param"] == "metadata.idempotency_key"
