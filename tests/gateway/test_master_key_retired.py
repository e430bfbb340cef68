"""An instance left running on the old master key after a rotation notices, reports unhealthy
and answers 503 `master_key_rotated` wherever it needs the key, until it is restarted."""

from __future__ import annotations

import base64
from pathlib import Path

from gateway.keyring.rotate import rotate_master_key
from storage.open import open_storage
from tests.gateway.keys_client import create_key, error_of
from tests.harness import Gateway, gateway_config, running_gateway
from tests.inference import Rig, inference_rig
from tests.waiting import wait_until_async

OLD = b"o" * 32
NEW = b"n" * 32
OWN_KEY = "sk-org-own-key-0001"
CONTENT = (
    b'{"messages": [{"role": "user", "content": "hi"},'
    b' {"role": "assistant", "content": "hello"}]}\n'
)
TOML = '[webhooks]\nallowed_private_networks = ["127.0.0.0/8"]\npoll_interval_s = 3600\n'


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


async def _upload(gw: Gateway, key: str) -> str:
    r = await gw.client.post(
        "/v1/files",
        data={"purpose": "fine-tune"},
        files={"file": ("train.jsonl", CONTENT, "application/jsonl")},
        headers=gw.auth(key),
    )
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


async def _rotate(database_url: str) -> None:
    async with open_storage(database_url) as storage:
        await rotate_master_key(storage.keyring, OLD, NEW)


def _assert_rotated(response: object) -> None:
    from httpx import Response

    assert isinstance(response, Response)
    assert response.status_code == 503, response.text
    error = error_of(response)
    assert error["code"] == "master_key_rotated"
    assert error["type"] == "server_error"
    assert "retired master key" in error["message"]
    assert "restarted with the new one" in error["message"]
    assert int(response.headers["Retry-After"]) > 0


async def test_old_instance_refuses_after_a_rotation_and_a_new_one_serves(
    database_url: str, tmp_path: Path
) -> None:
    old = gateway_config(database_url, tmp_path, toml=TOML, GATEWAY_MASTER_KEY=_b64(OLD))
    async with running_gateway(old) as gw:
        key = (await create_key(gw))["key"]
        file_id = await _upload(gw, key)
        before = await gw.client.get(f"/v1/files/{file_id}/content", headers=gw.auth(key))
        assert before.status_code == 200 and before.content == CONTENT
        assert (await gw.client.get("/healthz")).status_code == 200

        await _rotate(database_url)

        # The first use after the rotation: the failed decryption makes the instance look.
        _assert_rotated(await gw.client.get(f"/v1/files/{file_id}/content", headers=gw.auth(key)))
        health = await gw.client.get("/healthz")
        assert health.status_code == 503
        assert "retired master key" in error_of(health)["message"]
        assert "must be restarted" in error_of(health)["message"]
        # Every route that would seal under the old key refuses too (nothing new is written
        # that the new key could not open).
        _assert_rotated(await _upload_response(gw, key))
        _assert_rotated(
            await gw.client.post(
                "/v1/webhooks",
                json={"url": "https://127.0.0.1:9/hooks", "events": ["*"]},
                headers=gw.auth(),
            )
        )
        # What does not need the key still works.
        listed = await gw.client.get("/v1/files", headers=gw.auth(key))
        assert listed.status_code == 200

    new = gateway_config(database_url, tmp_path, toml=TOML, GATEWAY_MASTER_KEY=_b64(NEW))
    async with running_gateway(new) as gw2:
        after = await gw2.client.get(f"/v1/files/{file_id}/content", headers=gw2.auth(key))
        assert after.status_code == 200 and after.content == CONTENT
        assert (await gw2.client.get("/healthz")).status_code == 200


async def _upload_response(gw: Gateway, key: str) -> object:
    return await gw.client.post(
        "/v1/files",
        data={"purpose": "fine-tune"},
        files={"file": ("train.jsonl", CONTENT, "application/jsonl")},
        headers=gw.auth(key),
    )


async def test_old_instance_notices_a_rotation_without_any_request(
    database_url: str, tmp_path: Path
) -> None:
    """The periodic check: /healthz turns 503 though nothing failed to decrypt."""
    toml = TOML + "[server]\nkeyring_check_interval_s = 0.05\n"
    old = gateway_config(database_url, tmp_path, toml=toml, GATEWAY_MASTER_KEY=_b64(OLD))
    async with running_gateway(old) as gw:
        assert (await gw.client.get("/healthz")).status_code == 200
        await _rotate(database_url)

        async def unhealthy() -> bool:
            return (await gw.client.get("/healthz")).status_code == 503

        await wait_until_async(unhealthy)
        health = await gw.client.get("/healthz")
        assert "master key id" in error_of(health)["message"]
        assert health.headers.get("Retry-After")


BYOK_BODY = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


async def _add_own_key(rig: Rig) -> None:
    gw = rig.gateway
    r = await gw.client.post(
        "/v1/provider_keys", json={"provider": "sim", "api_key": OWN_KEY}, headers=gw.auth()
    )
    assert r.status_code == 201, r.text


def _sent_with_own_key(rig: Rig) -> bool:
    sent = [q for q in rig.upstream.requests if q.path == "/v1/chat/completions"]
    return sent[-1].headers.get("authorization") == f"Bearer {OWN_KEY}"


async def test_byok_call_after_a_rotation_is_503_not_re_enter_your_key(
    database_url: str, tmp_path: Path
) -> None:
    """The org's key is not cached yet: it fails to open, the instance looks, and the answer
    is the operator's 503 rather than a message telling the tenant to re-enter the key."""
    async with inference_rig(database_url, tmp_path, GATEWAY_MASTER_KEY=_b64(OLD)) as rig:
        await _add_own_key(rig)
        await _rotate(database_url)
        _assert_rotated(await rig.chat(BYOK_BODY))
        assert (await rig.gateway.client.get("/healthz")).status_code == 503


async def test_cached_byok_key_is_dropped_when_the_rotation_is_noticed(
    database_url: str, tmp_path: Path
) -> None:
    """A BYOK key this instance has cached would still work: once the rotation is noticed (here
    by a file download that fails to open), it is refused as well."""
    async with inference_rig(database_url, tmp_path, GATEWAY_MASTER_KEY=_b64(OLD)) as rig:
        gw = rig.gateway
        await _add_own_key(rig)
        file_id = await _upload(gw, rig.key)
        before = await rig.chat(BYOK_BODY)
        assert before.status_code == 200, before.text
        assert _sent_with_own_key(rig)  # the org's key is in this instance's cache now
        await _rotate(database_url)

        _assert_rotated(await gw.client.get(f"/v1/files/{file_id}/content", headers=gw.auth()))
        _assert_rotated(await rig.chat(BYOK_BODY))
