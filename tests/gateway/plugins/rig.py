"""A gateway with plugins (guardrails, the response cache) in front of the simulated upstream,
for the plugin tests: `plugin_rig(..., toml)` is `inference_rig` with `toml` added."""

from __future__ import annotations

import os
from typing import Any

import msgspec

from protocol.credentials import CredentialKind
from storage.events import Event
from tests.harness import Gateway
from tests.inference import Rig

PII_BLOCK = """
[[guardrails]]
name = "pii"
kind = "pii"
stages = ["input", "output"]
action = "block"
models = ["small"]
"""

PII_REDACT = """
[[guardrails]]
name = "pii-redact"
kind = "pii"
stages = ["input", "output"]
action = "redact"
report_redactions = true
"""


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "small", "messages": [{"role": "user", "content": text}], **extra}


def upstream_chats(rig: Rig) -> list[Any]:
    """The chat requests the upstream received, decoded."""
    return [
        msgspec.json.decode(r.body)
        for r in rig.upstream.requests
        if r.path.endswith("/chat/completions")
    ]


async def events_of(rig: Rig, type: str) -> list[Event]:
    return await events_of_org(rig.gateway, type)


async def events_of_org(gateway: Gateway, type: str) -> list[Event]:
    """The events of `type` of the gateway's organization, once its writer has flushed."""
    runtime = gateway.runtime
    await runtime.event_writer.flush()
    stored = await runtime.storage.events.list_for_org(gateway.org_id, limit=10_000)
    return [e for e in stored if e.type == type]


def stream_text(body: str) -> tuple[str, list[Any]]:
    """The streamed content's text and the decoded frames (less `[DONE]`)."""
    frames = [
        msgspec.json.decode(line[6:]) for line in body.split("\n") if line.startswith("data: {")
    ]
    text = "".join(
        (f["choices"][0]["delta"].get("content") or "") for f in frames if f.get("choices")
    )
    return text, frames


async def other_org_key(rig: Rig, credit_usd: float = 10.0) -> str:
    """A secret key of a second organization of the same gateway, topped up."""
    runtime, client = rig.gateway.runtime, rig.gateway.client
    org = await runtime.storage.orgs.create(f"other-{os.urandom(4).hex()}")
    credential = runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await runtime.storage.orgs.add_management_key(org.id, credential)
    auth = rig.gateway.auth(credential.value)
    topup = await client.post("/v1/credits/topup", json={"amount_usd": credit_usd}, headers=auth)
    assert topup.status_code == 200, topup.text
    r = await client.post("/v1/keys", json={"name": "other"}, headers=auth)
    key: str = r.json()["key"]
    return key
