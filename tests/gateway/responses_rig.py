"""Helpers for the Responses tests: the inference rig (a real gateway and the simulated upstream
on loopback, providers `sim` (OpenAI-compatible) and `claude` (Anthropic)), plus calls and the
upstream's recorded chat bodies."""

from __future__ import annotations

import os
from typing import Any

import httpx
import openai
import trio

from protocol.credentials import CredentialKind
from tests.inference import Rig

# The two translated provider kinds: model alias -> the upstream path it is called on.
MODELS = {"small": "/v1/chat/completions", "haiku": "/v1/messages"}


async def create(rig: Rig, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    return await rig.gateway.client.post(
        "/v1/responses", json=body, headers=rig.gateway.auth(key or rig.key)
    )


async def get(rig: Rig, path: str, key: str | None = None) -> httpx.Response:
    return await rig.gateway.client.get(path, headers=rig.gateway.auth(key or rig.key))


async def delete(rig: Rig, response_id: str, key: str | None = None) -> httpx.Response:
    return await rig.gateway.client.delete(
        f"/v1/responses/{response_id}", headers=rig.gateway.auth(key or rig.key)
    )


def upstream_bodies(rig: Rig, model: str) -> list[dict[str, Any]]:
    """The JSON bodies the upstream received for `model`'s provider, in order."""
    path = MODELS[model]
    return [r.json() for r in rig.upstream.requests if r.path == path]


def texts(rig: Rig, model: str) -> list[tuple[str, str]]:
    """The last upstream request's conversation as (role, text) pairs, whatever the wire
    format (OpenAI messages with a system message, or Anthropic's `system` + blocks)."""
    body = upstream_bodies(rig, model)[-1]
    out: list[tuple[str, str]] = []
    if "system" in body:
        out.append(("system", body["system"]))
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str) or content is None:
            out.append((message["role"], content or ""))
            continue
        for block in content:
            text = block.get("text") or block.get("content") or ""
            out.append((message["role"], text if isinstance(text, str) else str(text)))
    return out


def error_of(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()["error"]
    return body


async def other_org_key(rig: Rig) -> str:
    """A secret key of a second organization of the same gateway."""
    runtime = rig.gateway.runtime
    org = await runtime.storage.orgs.create(f"other-{os.urandom(4).hex()}")
    credential = runtime.hasher.generate(CredentialKind.MANAGEMENT)
    await runtime.storage.orgs.add_management_key(org.id, credential)
    r = await rig.gateway.client.post(
        "/v1/keys", json={"name": "other"}, headers=rig.gateway.auth(credential.value)
    )
    key: str = r.json()["key"]
    return key


def sdk(rig: Rig, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=rig.gateway.url + "/v1", api_key=key or rig.key, max_retries=0, timeout=30
    )


async def in_thread(fn: Any) -> Any:
    return await trio.to_thread.run_sync(fn)
