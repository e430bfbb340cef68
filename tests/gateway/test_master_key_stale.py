"""A master key rotated (for real, by `rotate_master_key`) under a running instance: the
instance notices, is not ready (live still), answers 503 `master_key_rotated` where the key is
needed, and keeps serving what does not need it (key management, inference without an org's
own provider key)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gateway.keyring.rotate import rotate_master_key
from protocol.provider_keys import sealing_context
from protocol.secretbox import PROVIDER_KEYS, SecretBox
from tests.harness import Gateway
from tests.inference import Rig, inference_rig
from tests.waiting import wait_until_async

NEW_KEY = b"n" * 32
MESSAGES = [{"role": "user", "content": "hello"}]


async def _rotate_and_notice(gw: Gateway) -> None:
    await rotate_master_key(gw.runtime.storage.keyring, gw.runtime.master_key, NEW_KEY)

    async def not_ready() -> bool:
        return (await gw.client.get("/readyz")).status_code == 503

    await wait_until_async(not_ready)


def _assert_rotated_503(r: httpx.Response) -> None:
    assert r.status_code == 503, (r.request.url, r.text)
    assert r.headers["retry-after"]
    error = r.json()["error"]
    assert error["code"] == "master_key_rotated" and error["type"] == "server_error"
    assert "restart" in error["message"] and "master key" in error["message"]


async def test_an_instance_on_a_rotated_key_is_not_ready_and_refuses_what_needs_it(
    gateway: Gateway,
) -> None:
    await _rotate_and_notice(gateway)
    live = await gateway.client.get("/livez")
    assert live.status_code == 200
    for path in ("/readyz", "/healthz"):
        r = await gateway.client.get(path)
        assert r.status_code == 503
        assert "master_key: the master key was rotated" in r.json()["error"]["message"], path
    for method, path, body in (
        ("GET", "/v1/files/file-abc/content", None),
        ("GET", "/v1/files", None),
        ("GET", "/v1/provider_keys", None),
        ("POST", "/v1/provider_keys", {"provider": "sim", "api_key": "sk-x"}),
        ("GET", "/v1/webhooks", None),
        ("GET", "/v1/responses/resp_abc", None),
    ):
        _assert_rotated_503(
            await gateway.client.request(method, path, json=body, headers=gateway.auth())
        )
    # What does not need the master key is still served.
    assert (await gateway.client.get("/v1/keys", headers=gateway.auth())).status_code == 200
    r = await gateway.client.post("/v1/keys", json={"name": "after"}, headers=gateway.auth())
    assert r.status_code == 200


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        yield r


async def test_inference_is_served_except_where_an_orgs_own_key_must_be_opened(rig: Rig) -> None:
    gw = rig.gateway
    old_key = gw.runtime.master_key
    await _rotate_and_notice(gw)
    r = await rig.chat({"model": "small", "messages": MESSAGES, "max_tokens": 5})
    assert r.status_code == 200, r.text
    # An own provider key written by an instance still on the old key (before it noticed).
    sealed = SecretBox.for_purpose(old_key, PROVIDER_KEYS).seal(
        "sk-org-own", sealing_context(gw.org_id, "sim")
    )
    await gw.runtime.storage.provider_keys.put(gw.org_id, "sim", sealed, "-own")
    gw.runtime.provider_keys.invalidate_all()  # as a credentials change seen by the poll does
    _assert_rotated_503(await rig.chat({"model": "small", "messages": MESSAGES, "max_tokens": 5}))
