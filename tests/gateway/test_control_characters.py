"""Control characters in the strings a JSON body asks the gateway to store or look up (names,
descriptions, ids of other objects, idempotency keys, stored metadata) are a 400 naming the
field, the same on both backends, over real HTTP. PostgreSQL cannot hold U+0000 in text: it
was a 500 there (CharacterNotInRepertoireError) while SQLite stored it. Text that is only
relayed (chat messages, their metadata) is not restricted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from tests.gateway.fine_tuning_rig import BASE, dataset, ft_rig, upload
from tests.gateway.keys_client import error_of
from tests.inference import Rig

pytestmark = pytest.mark.storage

# NUL (what PostgreSQL refuses), other C0 controls (TAB and LF included), DEL, and C1
# controls (NEL, CSI): none belongs in a one-line label (docs/decisions.md).
CONTROLS = ["\x00", "\x01", "\t", "\n", "\x1b", "\x7f", "\x85", "\x9b"]
# What stays allowed: any other character, spaces and punctuation included.
FINE = "Ünïcode 日本 – emoji 😀, spaces & <punctuation>!"
WEBHOOKS_TOML = '\n[webhooks]\nallowed_private_networks = ["127.0.0.0/8"]\n'
HOOK = "https://127.0.0.1:9/hooks"  # allowed by the config above; nothing listens


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with ft_rig(database_url, tmp_path, extra_toml=WEBHOOKS_TOML) as r:
        yield r


async def send(rig: Rig, method: str, path: str, body: Any, key: str | None = None) -> Any:
    return await rig.gateway.client.request(
        method,
        path,
        content=msgspec.json.encode(body),
        headers={**rig.gateway.auth(key), "content-type": "application/json"},
    )


def refused(r: httpx.Response, param: str) -> None:
    assert r.status_code == 400, r.text
    error = error_of(r)
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error"
    assert "control characters" in error["message"], error


async def test_key_names(rig: Rig) -> None:
    gw = rig.gateway
    for c in CONTROLS:
        refused(await send(rig, "POST", "/v1/keys", {"name": f"a{c}b"}), "name")
    created = await send(rig, "POST", "/v1/keys", {"name": FINE})
    assert created.status_code == 200 and created.json()["name"] == FINE
    key_id = created.json()["id"]
    for c in CONTROLS:
        refused(await send(rig, "PATCH", f"/v1/keys/{key_id}", {"name": f"{c}"}), "name")
        body = {"name": f"m{ord(c)}", "allowed_models": ["small", f"tiny{c}"]}
        refused(await send(rig, "POST", "/v1/keys", body), "allowed_models[1]")
    names = [k["name"] for k in (await gw.client.get("/v1/keys", headers=gw.auth())).json()["data"]]
    assert sorted(names) == sorted(["all", FINE])


async def test_webhook_descriptions(rig: Rig) -> None:
    for c in CONTROLS:
        body = {"url": HOOK, "events": ["*"], "description": f"d{c}"}
        refused(await send(rig, "POST", "/v1/webhooks", body), "description")
    created = await send(rig, "POST", "/v1/webhooks", {"url": HOOK, "events": ["*"]})
    assert created.status_code == 200, created.text
    path = f"/v1/webhooks/{created.json()['id']}"
    for c in CONTROLS:
        refused(await send(rig, "PATCH", path, {"description": f"{c}"}), "description")
    r = await send(rig, "PATCH", path, {"description": FINE})
    assert r.status_code == 200 and r.json()["description"] == FINE


async def test_chat_idempotency_keys(rig: Rig) -> None:
    messages = [{"role": "user", "content": "hello"}]
    for c in CONTROLS:
        body = {"model": "small", "messages": messages, "metadata": {"idempotency_key": f"k{c}"}}
        refused(
            await send(rig, "POST", "/v1/chat/completions", body, rig.key),
            "metadata.idempotency_key",
        )
    assert rig.upstream.requests == []
    # Relayed text is the provider's business: controls in messages and other metadata pass.
    body = {
        "model": "small",
        "messages": [{"role": "user", "content": "tab\there\x00\x85"}],
        "metadata": {"idempotency_key": FINE, "note": "a\x00b"},
    }
    r = await send(rig, "POST", "/v1/chat/completions", body, rig.key)
    assert r.status_code == 200, r.text
    again = await send(rig, "POST", "/v1/chat/completions", body, rig.key)
    assert again.headers.get("idempotent-replayed") == "true"
    assert len(rig.upstream.requests) == 1


async def test_top_up_idempotency_keys(rig: Rig) -> None:
    gw = rig.gateway
    # C0 controls never pass the HTTP parser; bytes 0x80-0x9F read as Latin-1 are C1 controls.
    for raw in (b"k\x85", b"\x9b31m"):
        r = await gw.client.post(
            "/v1/credits/topup",
            json={"amount_usd": 10},
            headers=[(k.encode(), v.encode()) for k, v in gw.auth().items()]
            + [(b"idempotency-key", raw)],
        )
        refused(r, "Idempotency-Key")
    for c in CONTROLS:
        body = {"amount_usd": 10, "payment_method_id": f"pm_card_visa{c}"}
        refused(await send(rig, "POST", "/v1/credits/topup", body), "payment_method_id")


async def test_fine_tuning_file_ids_and_model(rig: Rig) -> None:
    training = await upload(rig.gateway, rig.key, dataset())
    jobs = "/v1/fine_tuning/jobs"
    for c in CONTROLS:
        body = {"model": BASE, "training_file": f"file_{c}x"}
        refused(await send(rig, "POST", jobs, body, rig.key), "training_file")
        body = {"model": BASE, "training_file": training, "validation_file": f"file_{c}"}
        refused(await send(rig, "POST", jobs, body, rig.key), "validation_file")
        body = {"model": f"{BASE}{c}", "training_file": training}
        refused(await send(rig, "POST", jobs, body, rig.key), "model")
    assert (
        await send(rig, "POST", jobs, {"model": BASE, "training_file": training}, rig.key)
    ).status_code == 200


async def test_responses_ids_and_stored_metadata(rig: Rig) -> None:
    first = await send(rig, "POST", "/v1/responses", {"model": "small", "input": "hi"}, rig.key)
    assert first.status_code == 200, first.text
    for c in CONTROLS:
        body: dict[str, Any] = {"model": "small", "input": "x", "previous_response_id": f"resp_{c}"}
        refused(await send(rig, "POST", "/v1/responses", body, rig.key), "previous_response_id")
        for metadata in ({f"k{c}": "v"}, {"k": f"v{c}"}):
            body = {"model": "small", "input": "x", "metadata": metadata}
            refused(await send(rig, "POST", "/v1/responses", body, rig.key), "metadata")
    body = {"model": "small", "input": "x\x00", "metadata": {FINE[:60]: FINE}}
    r = await send(rig, "POST", "/v1/responses", body, rig.key)
    assert r.status_code == 200 and r.json()["metadata"] == {FINE[:60]: FINE}


BOUNDARY = b"b0undary"


def _upload_body(disposition: bytes) -> bytes:
    return (
        b"--" + BOUNDARY + b'\r\ncontent-disposition: form-data; name="purpose"\r\n\r\n'
        b"fine-tune\r\n--"
        + BOUNDARY
        + b'\r\ncontent-disposition: form-data; name="file"; '
        + disposition
        + b"\r\ncontent-type: application/jsonl\r\n\r\n"
        + dataset()
        + b"\r\n--"
        + BOUNDARY
        + b"--\r\n"
    )


@pytest.mark.parametrize(
    ("disposition", "stored"),
    [
        (b'filename="tr\x00ain.jsonl"', "train.jsonl"),
        (b"filename=\"x.jsonl\"; filename*=UTF-8''a%00b%1B%C2%85.jsonl", "ab.jsonl"),
    ],
)
async def test_upload_filenames_with_nul(rig: Rig, disposition: bytes, stored: str) -> None:
    """A filename is the client's label, often chosen by its OS rather than by the caller:
    its control characters are dropped (docs/decisions.md, "Multipart"), the same on both
    backends, never a 500."""
    gw = rig.gateway
    r = await gw.client.post(
        "/v1/files",
        content=_upload_body(disposition),
        headers={
            **gw.auth(rig.key),
            "content-type": "multipart/form-data; boundary=" + BOUNDARY.decode(),
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["filename"] == stored
    listed = (await gw.client.get("/v1/files", headers=gw.auth(rig.key))).json()["data"]
    assert [f["filename"] for f in listed] == [stored]
