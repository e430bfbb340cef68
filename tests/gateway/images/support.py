"""The images rig: the inference rig (a real gateway and the simulated upstream on loopback)
with one image model of each family, priced per image (by size and quality for dall-e-3)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import openai
import trio

from bench.upstream.behavior import RecordedRequest
from tests.inference import Rig, inference_rig

DALLE3_STANDARD = Decimal("0.04")
DALLE3_TALL = Decimal("0.08")  # 1024x1792, standard
DALLE3_TALL_HD = Decimal("0.12")  # 1024x1792, hd
DALLE2_PRICE = Decimal("0.02")
DALLE2_SMALL = Decimal("0.018")  # 512x512
FLUX_PRICE = Decimal("0.003")

IMAGES_TOML = f"""
[[models]]
id = "dalle3"
provider = "sim"
upstream = "dall-e-3"
usd_per_image = {DALLE3_STANDARD}
usd_per_image_by = {{ "1024x1792" = {DALLE3_TALL}, "1024x1792/hd" = {DALLE3_TALL_HD} }}

[[models]]
id = "dalle2"
provider = "sim"
upstream = "dall-e-2"
usd_per_image = {DALLE2_PRICE}
usd_per_image_by = {{ "512x512" = {DALLE2_SMALL} }}

[[models]]
id = "flux"
provider = "sim"
upstream = "flux-schnell"
usd_per_image = {FLUX_PRICE}

[[models]]
id = "unpriced-image"
provider = "sim"
upstream = "dall-e-2"
"""


@asynccontextmanager
async def images_rig(
    database_url: str,
    tmp_path: Path,
    *,
    lifetime_s: int | None = None,
    extra_toml: str = "",
    **kwargs: Any,
) -> AsyncIterator[Rig]:
    toml = IMAGES_TOML + extra_toml
    if lifetime_s is not None:
        toml = f"[images]\nurl_lifetime_s = {lifetime_s}\n" + toml
    async with inference_rig(database_url, tmp_path, extra_toml=toml, **kwargs) as rig:
        yield rig


def sdk(rig: Rig, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=rig.gateway.url + "/v1", api_key=key or rig.key, max_retries=0, timeout=30
    )


async def in_thread(fn: Any) -> Any:
    return await trio.to_thread.run_sync(fn)


async def generate(rig: Rig, body: dict[str, Any], key: str | None = None) -> Any:
    return await rig.gateway.client.post(
        "/v1/images/generations", json=body, headers=rig.gateway.auth(key or rig.key)
    )


def image_requests(rig: Rig, path: str) -> list[RecordedRequest]:
    return [r for r in rig.upstream.requests if r.path == "/v1/images/" + path]


def error_of(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}, body
    return body
