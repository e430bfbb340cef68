"""POST /v1/images/generations over real HTTP against the simulated upstream, on both
backends: the official SDK for the happy paths, plain httpx for every refusal (each field,
limit and family rule), and what the gateway sent upstream."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from bench.upstream.image_routes import image_for
from tests.gateway.images.support import (
    error_of,
    generate,
    image_requests,
    images_rig,
    in_thread,
    sdk,
)
from tests.inference import Rig


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with images_rig(database_url, tmp_path) as r:
        yield r


async def test_sdk_generates_b64_json_with_the_revised_prompt(rig: Rig) -> None:
    with sdk(rig) as client:
        result = await in_thread(
            lambda: client.images.generate(
                model="dalle3",
                prompt="a lighthouse",
                size="1024x1792",
                quality="hd",
                style="natural",
                response_format="b64_json",
            )
        )
        assert len(result.data) == 1
        assert base64.b64decode(result.data[0].b64_json) == image_for("a lighthouse", 0)
        assert result.data[0].revised_prompt == "A detailed rendering of: a lighthouse"
        sent = image_requests(rig, "generations")[-1].json()
        assert sent == {
            "model": "dall-e-3",
            "prompt": "a lighthouse",
            "n": 1,
            "size": "1024x1792",
            "response_format": "b64_json",
            "quality": "hd",
            "style": "natural",
        }


async def test_sdk_url_is_the_default_and_always_asks_upstream_for_b64(rig: Rig) -> None:
    with sdk(rig) as client:
        result = await in_thread(lambda: client.images.generate(model="dalle2", prompt="fox", n=3))
        assert len(result.data) == 3
        for i, item in enumerate(result.data):
            assert item.b64_json is None and item.url is not None
            got = await rig.gateway.client.get(item.url)
            assert got.status_code == 200 and got.content == image_for("fox", i)
        assert image_requests(rig, "generations")[-1].json()["response_format"] == "b64_json"


async def test_diffusion_fields_are_forwarded(rig: Rig) -> None:
    body = {
        "model": "flux",
        "prompt": "a river",
        "n": 2,
        "size": "1792x1024",
        "quality": "hd",
        "negative_prompt": "blur",
        "seed": 42,
        "aspect_ratio": "16:9",
        "response_format": "b64_json",
    }
    r = await generate(rig, body)
    assert r.status_code == 200, r.text
    assert len(r.json()["data"]) == 2
    sent = image_requests(rig, "generations")[-1].json()
    assert sent["model"] == "flux-schnell"
    assert (sent["negative_prompt"], sent["seed"], sent["aspect_ratio"]) == ("blur", 42, "16:9")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "dalle3", "prompt": "x" * 4001}, "prompt"),
        ({"model": "dalle3", "prompt": " "}, "prompt"),
        ({"model": "dalle3", "prompt": "a", "n": 2}, "n"),
        ({"model": "dalle2", "prompt": "a", "n": 11}, "n"),
        ({"model": "flux", "prompt": "a", "n": 11}, "n"),
        ({"model": "dalle2", "prompt": "a", "n": 0}, "n"),
        ({"model": "dalle3", "prompt": "a", "size": "512x512"}, "size"),
        ({"model": "dalle2", "prompt": "a", "size": "1024x1792"}, "size"),
        ({"model": "flux", "prompt": "a", "size": "100x100"}, "size"),
        ({"model": "dalle3", "prompt": "a", "quality": "ultra"}, "quality"),
        ({"model": "dalle2", "prompt": "a", "quality": "hd"}, "quality"),
        ({"model": "dalle3", "prompt": "a", "style": "cartoon"}, "style"),
        ({"model": "dalle2", "prompt": "a", "style": "vivid"}, "style"),
        ({"model": "flux", "prompt": "a", "style": "vivid"}, "style"),
        ({"model": "dalle3", "prompt": "a", "negative_prompt": "b"}, "negative_prompt"),
        ({"model": "dalle2", "prompt": "a", "negative_prompt": "b"}, "negative_prompt"),
        ({"model": "dalle3", "prompt": "a", "seed": 1}, "seed"),
        ({"model": "dalle2", "prompt": "a", "aspect_ratio": "1:1"}, "aspect_ratio"),
        ({"model": "flux", "prompt": "a", "aspect_ratio": "5:1"}, "aspect_ratio"),
        ({"model": "flux", "prompt": "a", "seed": -1}, "seed"),
        ({"model": "flux", "prompt": "a", "negative_prompt": "n" * 4001}, "negative_prompt"),
        ({"model": "dalle2", "prompt": "a", "response_format": "jpeg"}, "response_format"),
        ({"model": "dalle2", "prompt": "a", "colour": "red"}, "colour"),
        ({"model": "dalle2"}, "prompt"),
        ({"model": "dalle2", "prompt": "a", "n": "2"}, "n"),
    ],
)
async def test_invalid_fields_are_400_naming_the_param(
    rig: Rig, body: dict[str, Any], param: str
) -> None:
    before = len(rig.upstream.requests)
    r = await generate(rig, body)
    assert r.status_code == 400, r.text
    error = error_of(r)
    assert error["param"] == param and error["type"] == "invalid_request_error", error
    assert len(rig.upstream.requests) == before  # refused before the provider was asked


async def test_prompt_of_4000_characters_is_accepted_for_single_image(rig: Rig) -> None:
    r = await generate(
        rig, {"model": "dalle3", "prompt": "x" * 4000, "response_format": "b64_json"}
    )
    assert r.status_code == 200, r.text


async def test_content_policy_refusal_is_400_content_policy_violation(rig: Rig) -> None:
    r = await generate(rig, {"model": "dalle3", "prompt": "something forbidden"})
    assert r.status_code == 400
    assert error_of(r)["code"] == "content_policy_violation"
    with sdk(rig) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await in_thread(lambda: client.images.generate(model="dalle2", prompt="forbidden"))
        assert caught.value.code == "content_policy_violation"


async def test_an_upstream_answering_with_a_url_is_502_never_fetched(rig: Rig) -> None:
    r = await generate(rig, {"model": "dalle2", "prompt": "[answer-with-url] a cat"})
    assert r.status_code == 502
    assert error_of(r)["code"] == "upstream_bad_response"
    # Only the generation went out: the named URL was not fetched.
    assert [q.path for q in rig.upstream.requests if "images" in q.path] == [
        "/v1/images/generations"
    ]


async def test_unknown_model_and_a_chat_model(rig: Rig) -> None:
    r = await generate(rig, {"model": "nope", "prompt": "a"})
    assert r.status_code == 404


async def test_unpriced_model_is_model_price_unknown(rig: Rig) -> None:
    r = await generate(rig, {"model": "unpriced-image", "prompt": "a"})
    assert r.status_code == 400 and error_of(r)["code"] == "model_price_unknown"


async def test_size_without_a_price_is_model_price_unknown(
    database_url: str, tmp_path: Path
) -> None:
    toml = """
[[models]]
id = "sized-only"
provider = "sim"
upstream = "dall-e-2"
usd_per_image_by = { "1024x1024" = 0.02 }
"""
    async with images_rig(database_url, tmp_path, extra_toml=toml) as rig:
        r = await generate(rig, {"model": "sized-only", "prompt": "a", "size": "512x512"})
        assert r.status_code == 400
        assert error_of(r)["code"] == "model_price_unknown" and error_of(r)["param"] == "size"
        ok = await generate(rig, {"model": "sized-only", "prompt": "a"})
        assert ok.status_code == 200


async def test_invalid_json_and_empty_body(rig: Rig) -> None:
    for content in (b"", b"{", b"[]", json.dumps({"model": 5, "prompt": "a"}).encode()):
        r = await rig.gateway.client.post(
            "/v1/images/generations",
            content=content,
            headers={**rig.gateway.auth(rig.key), "content-type": "application/json"},
        )
        assert r.status_code == 400, content


async def test_models_list_shows_the_image_models(rig: Rig) -> None:
    r = await rig.gateway.client.get("/v1/models", headers=rig.gateway.auth(rig.key))
    ids = {m["id"] for m in r.json()["data"]}
    assert {"dalle3", "dalle2", "flux"} <= ids


async def test_openapi_documents_every_images_route(rig: Rig) -> None:
    spec = (await rig.gateway.client.get("/openapi.json")).json()
    paths = spec["paths"]
    for path in ("/v1/images/generations", "/v1/images/edits", "/v1/images/variations"):
        assert "post" in paths[path], path
    assert "get" in paths["/v1/images/content/{token}"]
