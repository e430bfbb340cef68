"""Fine-tuned models are models, over real HTTP against the simulated upstream's fine-tuning
provider, on both backends. The model is trained at the bench upstream (a real job on a zero
schedule) and registered through the storage API, as the job watcher does: chat with it —
plain, streamed, with tool calls — reaches the provider's model id while the client sees the
`ft:` name, billed exactly at the base model's prices (or its own `[[models]]` prices);
another organization can neither use, see nor delete it; DELETE removes it here and at the
provider; hostile names are 4xx, never 500."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import msgspec
import pytest

from protocol.billing import charge_micros
from protocol.credentials import CredentialKind
from protocol.timefmt import now_us
from tests.backends import REDIS_URL
from tests.gateway.keys_client import create_key, error_of
from tests.inference import PRICE_IN, PRICE_OUT, Rig, chunks, inference_rig, ledger, two_instances

MESSAGES = [{"role": "user", "content": "hello there"}]
TRAINING = (
    b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'
)
CREDIT = 100_000_000


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with inference_rig(database_url, tmp_path) as r:
        r.upstream.behavior.fine_tune_schedule_s = (0.0, 0.0, 0.0)
        yield r


async def train_upstream(rig: Rig, suffix: str = "custom") -> str:
    """A fine-tuned model at the simulated provider (its own id), trained at once."""
    auth = {"authorization": "Bearer k"}
    async with httpx.AsyncClient(base_url=rig.upstream.url, headers=auth) as upstream:
        uploaded = await upstream.post(
            "/v1/files", data={"purpose": "fine-tune"}, files={"file": ("t.jsonl", TRAINING)}
        )
        job = await upstream.post(
            "/v1/fine_tuning/jobs",
            json={"model": "sim-small", "training_file": uploaded.json()["id"], "suffix": suffix},
        )
        done = (await upstream.get(f"/v1/fine_tuning/jobs/{job.json()['id']}")).json()
    assert done["status"] == "succeeded"
    return str(done["fine_tuned_model"])


async def register(
    rig: Rig, *, org_id: str | None = None, base_model: str = "small"
) -> tuple[str, str]:
    """(our `ft:` name, the provider's id) of a model registered for the org."""
    org = org_id or rig.gateway.org_id
    upstream_model = await train_upstream(rig)
    name = f"ft:sim-small:{org}:custom:ftjob_{now_us()}"
    await rig.gateway.runtime.storage.fine_tuned_models.register(
        model_id=name,
        org_id=org,
        provider="sim",
        upstream_model=upstream_model,
        base_model=base_model,
        job_id="ftjob_test",
        created_at_us=1_800_000_000_000_000,
    )
    return name, upstream_model


async def other_org_key(rig: Rig) -> str:
    """A secret key with every scope in a second organization."""
    runtime = rig.gateway.runtime
    org = await runtime.storage.orgs.create("other")
    credential = runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await runtime.storage.orgs.add_management_key(org.id, credential)
    return str((await create_key(rig.gateway, credential.value, name="theirs"))["key"])


def upstream_chats(rig: Rig) -> list[Any]:
    return [r.json() for r in rig.upstream.requests if r.path == "/v1/chat/completions"]


def expected_charge(
    usage: dict[str, int], price_in: Decimal = PRICE_IN, price_out: Decimal = PRICE_OUT
) -> int:
    cost = (usage["prompt_tokens"] * price_in + usage["completion_tokens"] * price_out) / 10**6
    return charge_micros(cost, Decimal(4))


async def test_chat_is_routed_to_the_provider_model_and_billed_at_base_prices(rig: Rig) -> None:
    name, upstream_model = await register(rig)
    r = await rig.chat({"model": name, "messages": MESSAGES, "max_tokens": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == name
    assert body["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4 "
    assert upstream_chats(rig)[-1]["model"] == upstream_model
    charge = expected_charge(body["usage"])
    balance, rows = await ledger(rig, 1)
    assert balance == CREDIT - charge
    assert [(row.amount_micros, row.model) for row in rows] == [(-charge, name)]


async def test_streamed_chat_reports_the_ft_name_and_is_billed(rig: Rig) -> None:
    name, upstream_model = await register(rig)
    r = await rig.chat(
        {
            "model": name,
            "messages": MESSAGES,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    parsed = chunks(r.text)
    assert parsed and {c["model"] for c in parsed} == {name}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in parsed if c["choices"])
    assert upstream_chats(rig)[-1]["model"] == upstream_model
    usage = parsed[-1]["usage"]
    balance, rows = await ledger(rig, 1)
    assert balance == CREDIT - expected_charge(usage) and rows[0].model == name


async def test_tool_calls_plain_and_streamed(rig: Rig) -> None:
    name, upstream_model = await register(rig)
    rig.upstream.behavior.tool_call = True
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    r = await rig.chat({"model": name, "messages": MESSAGES, "tools": tools})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and r.json()["model"] == name
    assert choice["message"]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    r = await rig.chat({"model": name, "messages": MESSAGES, "tools": tools, "stream": True})
    parsed = chunks(r.text)
    arguments = "".join(
        call["function"].get("arguments", "")
        for c in parsed
        if c["choices"]
        for call in c["choices"][0]["delta"].get("tool_calls", [])
    )
    assert arguments == '{"city": "Paris"}' and {c["model"] for c in parsed} == {name}
    sent = upstream_chats(rig)
    assert [s["model"] for s in sent] == [upstream_model, upstream_model]
    assert sent[-1]["tools"] == tools
    _, rows = await ledger(rig, 2)
    assert len(rows) == 2


async def test_configured_prices_override_the_base_models(
    database_url: str, tmp_path: Path
) -> None:
    org_name = "ft:sim-small:fixed:custom:ftjob_priced"
    extra = f"""
[[models]]
id = "{org_name}"
provider = "sim"
upstream = "ignored"
input_usd_per_mtok = 3
output_usd_per_mtok = 7
"""
    async with inference_rig(database_url, tmp_path, extra_toml=extra) as rig:
        rig.upstream.behavior.fine_tune_schedule_s = (0.0, 0.0, 0.0)
        upstream_model = await train_upstream(rig)
        await rig.gateway.runtime.storage.fine_tuned_models.register(
            model_id=org_name,
            org_id=rig.gateway.org_id,
            provider="sim",
            upstream_model=upstream_model,
            base_model="small",
            job_id="ftjob_test",
            created_at_us=1,
        )
        r = await rig.chat({"model": org_name, "messages": MESSAGES, "max_tokens": 3})
        assert r.status_code == 200, r.text
        assert upstream_chats(rig)[-1]["model"] == upstream_model
        charge = expected_charge(r.json()["usage"], Decimal(3), Decimal(7))
        balance, rows = await ledger(rig, 1)
        assert balance == CREDIT - charge and rows[0].model == org_name
        # The entry does not make the name usable by another organization.
        theirs = await other_org_key(rig)
        r = await rig.chat({"model": org_name, "messages": MESSAGES}, key=theirs)
        assert r.status_code == 404


async def test_another_org_can_neither_use_see_nor_delete_it(rig: Rig) -> None:
    name, _ = await register(rig)
    theirs = await other_org_key(rig)
    client, auth = rig.gateway.client, rig.gateway.auth(theirs)
    for stream in (False, True):
        r = await rig.chat({"model": name, "messages": MESSAGES, "stream": stream}, key=theirs)
        assert r.status_code == 404 and error_of(r)["code"] == "model_not_found"
    assert name not in [
        m["id"] for m in (await client.get("/v1/models", headers=auth)).json()["data"]
    ]
    assert (await client.get(f"/v1/models/{name}", headers=auth)).status_code == 404
    r = await client.delete(f"/v1/models/{name}", headers=auth)
    assert r.status_code == 404 and error_of(r)["code"] == "model_not_found"
    assert upstream_chats(rig) == []
    mine = await rig.chat({"model": name, "messages": MESSAGES, "max_tokens": 1})
    assert mine.status_code == 200


async def test_models_list_and_retrieve_include_the_orgs_models(rig: Rig) -> None:
    name, _ = await register(rig)
    client, auth = rig.gateway.client, rig.gateway.auth(rig.key)
    listed = (await client.get("/v1/models", headers=auth)).json()["data"]
    assert listed[-1] == {
        "id": name,
        "object": "model",
        "created": 1_800_000_000,
        "owned_by": rig.gateway.org_id,
    }
    assert [m["id"] for m in listed[:-1]] == ["gone", "small", "embed", "haiku"]
    one = await client.get(f"/v1/models/{name}", headers=auth)
    assert one.status_code == 200 and one.json() == listed[-1]
    limited = (await create_key(rig.gateway, name="small only", allowed_models=["small"]))["key"]
    r = await rig.chat({"model": name, "messages": MESSAGES}, key=limited)
    assert r.status_code == 403 and error_of(r)["code"] == "model_not_allowed"
    listed = (await client.get("/v1/models", headers=rig.gateway.auth(limited))).json()["data"]
    assert [m["id"] for m in listed] == ["small"]
    assert (
        await client.get(f"/v1/models/{name}", headers=rig.gateway.auth(limited))
    ).status_code == 404
    allowed = (await create_key(rig.gateway, name="ft only", allowed_models=[name]))["key"]
    r = await rig.chat({"model": name, "messages": MESSAGES, "max_tokens": 1}, key=allowed)
    assert r.status_code == 200


async def test_delete_removes_it_here_and_at_the_provider(rig: Rig) -> None:
    name, upstream_model = await register(rig)
    client, auth = rig.gateway.client, rig.gateway.auth(rig.key)
    r = await client.delete(f"/v1/models/{name}", headers=auth)
    assert r.status_code == 200, r.text
    assert r.json() == {"id": name, "object": "model", "deleted": True}
    deletes = [q for q in rig.upstream.requests if q.method == "DELETE"]
    assert [q.path for q in deletes] == [f"/v1/models/{upstream_model.replace(':', '%3A')}"]
    assert rig.upstream.fine_tuning.statistics()["models_deleted"] == 1
    r = await rig.chat({"model": name, "messages": MESSAGES})
    assert r.status_code == 404 and error_of(r)["code"] == "model_not_found"
    assert (await client.get(f"/v1/models/{name}", headers=auth)).status_code == 404
    assert name not in [
        m["id"] for m in (await client.get("/v1/models", headers=auth)).json()["data"]
    ]
    r = await client.delete(f"/v1/models/{name}", headers=auth)
    assert r.status_code == 404
    assert upstream_chats(rig) == []


async def test_delete_when_the_provider_already_lost_it_and_when_it_fails(rig: Rig) -> None:
    client, auth = rig.gateway.client, rig.gateway.auth(rig.key)
    gone, upstream_model = await register(rig)
    async with httpx.AsyncClient(base_url=rig.upstream.url) as upstream:
        r = await upstream.delete(
            f"/v1/models/{upstream_model}", headers={"authorization": "Bearer k"}
        )
        assert r.status_code == 200
    r = await client.delete(f"/v1/models/{gone}", headers=auth)
    assert r.status_code == 200  # the provider's 404: already gone there

    kept, _ = await register(rig)
    rig.upstream.behavior.fail_status = 503
    r = await client.delete(f"/v1/models/{kept}", headers=auth)
    assert r.status_code == 502 and error_of(r)["type"] == "upstream_error"
    rig.upstream.behavior.fail_status = None
    assert (await client.get(f"/v1/models/{kept}", headers=auth)).status_code == 200
    r = await client.delete(f"/v1/models/{kept}", headers=auth)
    assert r.status_code == 200


async def test_delete_needs_the_fine_tuning_scope_and_refuses_configured_models(rig: Rig) -> None:
    name, _ = await register(rig)
    client = rig.gateway.client
    chat_only = (
        await create_key(rig.gateway, name="chat", scopes=["chat:completions", "models:read"])
    )["key"]
    r = await client.delete(f"/v1/models/{name}", headers=rig.gateway.auth(chat_only))
    assert r.status_code == 403
    for configured in ("small", "sim/sim-small"):
        r = await client.delete(f"/v1/models/{configured}", headers=rig.gateway.auth(rig.key))
        assert r.status_code == 403 and error_of(r)["code"] == "model_not_deletable"
    r = await client.delete("/v1/models/nope", headers=rig.gateway.auth(rig.key))
    assert r.status_code == 404
    assert (
        await rig.chat({"model": name, "messages": MESSAGES, "max_tokens": 1})
    ).status_code == 200


@pytest.mark.parametrize(
    "name",
    [
        "ft:",
        "ft:" + "x" * 5000,
        "ft:" + "x" * 100_000,
        "ft:a\u0000b",
        "ft:a\nb",
        "ft:\u00e9\u4e2d\U0001f600",
        "ft:' OR 1=1 --",
        "ft:%00",
        "ft:../../etc",
        "FT:upper",
    ],
)
async def test_hostile_names_are_404_never_500(rig: Rig, name: str) -> None:
    client, auth = rig.gateway.client, rig.gateway.auth(rig.key)
    for stream in (False, True):
        r = await rig.chat({"model": name, "messages": MESSAGES, "stream": stream})
        assert r.status_code == 404, r.text
        assert error_of(r)["code"] == "model_not_found"
    path = "/v1/models/" + quote(name, safe=":")
    for method in ("GET", "DELETE"):
        if len(path) > 60_000:
            break  # over httpx's own URL limit
        r = await client.request(method, path, headers=auth)
        assert 400 <= r.status_code < 500, (method, r.status_code, r.text[:200])
    assert upstream_chats(rig) == []


async def test_a_model_whose_provider_is_no_longer_configured_is_404(rig: Rig) -> None:
    name = f"ft:x:{rig.gateway.org_id}::ftjob_1"
    await rig.gateway.runtime.storage.fine_tuned_models.register(
        model_id=name,
        org_id=rig.gateway.org_id,
        provider="removed",
        upstream_model="ft:x:bench::1",
        base_model="small",
        job_id="ftjob_1",
        created_at_us=1,
    )
    r = await rig.chat({"model": name, "messages": MESSAGES})
    assert (
        r.status_code == 404
        and msgspec.json.decode(r.content)["error"]["code"] == "model_not_found"
    )


@pytest.mark.skipif(REDIS_URL is None, reason="needs GATEWAY_TEST_REDIS_URL")
async def test_registration_and_deletion_apply_at_once_on_every_instance(
    database_url: str, tmp_path: Path
) -> None:
    assert REDIS_URL is not None
    async with two_instances(database_url, tmp_path, REDIS_URL) as (a, b):
        key = (await create_key(a, name="shared"))["key"]
        name = f"ft:sim-small:{a.org_id}::ftjob_1"
        before = await b.client.get(f"/v1/models/{name}", headers=b.auth(key))
        assert before.status_code == 404  # looked up once on b: nothing may be cached
        await a.runtime.storage.fine_tuned_models.register(
            model_id=name,
            org_id=a.org_id,
            provider="sim",
            upstream_model="ft:sim-small:bench::00000001",
            base_model="small",
            job_id="ftjob_1",
            created_at_us=1,
        )
        assert (await b.client.get(f"/v1/models/{name}", headers=b.auth(key))).status_code == 200
        # The simulated provider never made this model: its 404 counts as deleted there.
        r = await a.client.delete(f"/v1/models/{name}", headers=a.auth(key))
        assert r.status_code == 200, r.text
        chat = {"model": name, "messages": MESSAGES}
        r = await b.client.post("/v1/chat/completions", json=chat, headers=b.auth(key))
        assert r.status_code == 404 and error_of(r)["code"] == "model_not_found"
        assert (await b.client.get(f"/v1/models/{name}", headers=b.auth(key))).status_code == 404
