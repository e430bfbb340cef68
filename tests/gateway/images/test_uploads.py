"""POST /v1/images/edits and /variations: multipart PNGs held (each at most 4 MB, square),
the upstream form the gateway builds (model rewritten, b64_json asked for), the SDK's
`images.edit` and `images.create_variation`, and hostile forms."""

from __future__ import annotations

import base64
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bench.upstream.image_routes import form_parts, image_for, png
from tests.gateway.images.support import error_of, image_requests, images_rig, in_thread, sdk
from tests.inference import Rig

PNG = png((10, 20, 30), side=16)
MASK = png((0, 0, 0), side=16)


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with images_rig(database_url, tmp_path) as r:
        yield r


async def post_form(rig: Rig, path: str, data: dict[str, str], files: dict[str, Any]) -> Any:
    if not files:  # httpx sends a form without files urlencoded: make the fields parts
        files, data = {k: (None, v) for k, v in data.items()}, {}
    return await rig.gateway.client.post(
        f"/v1/images/{path}", data=data, files=files, headers=rig.gateway.auth(rig.key)
    )


async def test_sdk_edit_with_mask(rig: Rig) -> None:
    with sdk(rig) as client:
        result = await in_thread(
            lambda: client.images.edit(
                model="dalle2",
                image=("in.png", PNG, "image/png"),
                mask=("mask.png", MASK, "image/png"),
                prompt="add a hat",
                n=2,
                size="512x512",
                response_format="b64_json",
            )
        )
        assert [base64.b64decode(d.b64_json) for d in result.data] == [
            image_for("add a hat", 0),
            image_for("add a hat", 1),
        ]
        sent = image_requests(rig, "edits")[-1]
        parts = form_parts(sent)
        assert parts["model"] == b"dall-e-2" and parts["response_format"] == b"b64_json"
        assert parts["image"] == PNG and parts["mask"] == MASK
        assert (parts["n"], parts["size"], parts["prompt"]) == (b"2", b"512x512", b"add a hat")


async def test_sdk_variation_answers_urls(rig: Rig) -> None:
    with sdk(rig) as client:

        def create_variation() -> Any:
            # The SDK marks create_variation deprecated (OpenAI's dall-e-2 retirement); the
            # route is the API's all the same.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return client.images.create_variation(
                    model="flux", image=("in.png", PNG, "image/png"), n=2
                )

        result = await in_thread(create_variation)
        assert len(result.data) == 2
        for item in result.data:
            got = await rig.gateway.client.get(item.url)
            assert got.status_code == 200 and got.content.startswith(b"\x89PNG")
        parts = form_parts(image_requests(rig, "variations")[-1])
        assert parts["model"] == b"flux-schnell" and "prompt" not in parts


@pytest.mark.parametrize(
    ("path", "data", "files", "param"),
    [
        ("edits", {"model": "dalle2", "prompt": "a"}, {}, "image"),
        ("edits", {"model": "dalle2"}, {"image": PNG}, "prompt"),
        ("edits", {"prompt": "a"}, {"image": PNG}, "model"),  # no [images] default_model
        ("variations", {}, {"image": PNG}, "model"),
        ("edits", {"model": "dalle2", "prompt": "a"}, {"image": b"GIF89a" + b"0" * 40}, "image"),
        ("edits", {"model": "dalle2", "prompt": "a"}, {"image": PNG[:30]}, "image"),
        ("edits", {"model": "dalle2", "prompt": "a"}, {"image": png((1, 2, 3), 8)[:-12]}, "image"),
        (
            "edits",
            {"model": "dalle2", "prompt": "a"},
            {"image": PNG, "mask": png((0, 0, 0), side=8)},
            "mask",
        ),
        ("edits", {"model": "dalle2", "prompt": "a", "n": "11"}, {"image": PNG}, "n"),
        ("edits", {"model": "dalle2", "prompt": "a", "n": "two"}, {"image": PNG}, "n"),
        ("edits", {"model": "dalle2", "prompt": "a", "size": "1792x1024"}, {"image": PNG}, "size"),
        ("edits", {"model": "dalle3", "prompt": "a"}, {"image": PNG}, "model"),
        ("edits", {"model": "dalle2", "prompt": "a", "style": "vivid"}, {"image": PNG}, "style"),
        (
            "edits",
            {"model": "dalle2", "prompt": "a", "response_format": "gif"},
            {"image": PNG},
            "response_format",
        ),
        ("variations", {"model": "dalle2", "prompt": "a"}, {"image": PNG}, "prompt"),
        ("variations", {"model": "dalle2"}, {"image": PNG, "mask": MASK}, "mask"),
        ("variations", {"model": "dalle3"}, {"image": PNG}, "model"),
    ],
)
async def test_invalid_forms_are_400_naming_the_param(
    rig: Rig, path: str, data: dict[str, str], files: dict[str, bytes], param: str
) -> None:
    before = len(rig.upstream.requests)
    r = await post_form(
        rig, path, data, {k: (f"{k}.png", v, "image/png") for k, v in files.items()}
    )
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == param, r.text
    assert len(rig.upstream.requests) == before


async def test_a_non_square_png_is_refused(rig: Rig) -> None:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    wide = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 2, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress((b"\x00" + b"\x01\x02\x03" * 4) * 2))
        + chunk(b"IEND", b"")
    )
    r = await post_form(
        rig, "variations", {"model": "dalle2"}, {"image": ("w.png", wide, "image/png")}
    )
    assert r.status_code == 400 and error_of(r)["param"] == "image"
    assert "square" in error_of(r)["message"]


async def test_an_image_over_4_mb_is_refused(rig: Rig) -> None:
    big = PNG + b"\x00" * (4 * 1024 * 1024)
    r = await post_form(
        rig, "variations", {"model": "dalle2"}, {"image": ("b.png", big, "image/png")}
    )
    assert r.status_code == 400
    assert error_of(r)["code"] == "file_too_large" and error_of(r)["param"] == "image"


async def test_not_multipart_is_415(rig: Rig) -> None:
    r = await rig.gateway.client.post(
        "/v1/images/edits", json={"model": "dalle2"}, headers=rig.gateway.auth(rig.key)
    )
    assert r.status_code == 415


async def test_edit_content_policy(rig: Rig) -> None:
    r = await post_form(
        rig,
        "edits",
        {"model": "dalle2", "prompt": "forbidden"},
        {"image": ("i.png", PNG, "image/png")},
    )
    assert r.status_code == 400 and error_of(r)["code"] == "content_policy_violation"


def raw_form(*parts: tuple[str, bytes, str | None]) -> tuple[bytes, str]:
    """A multipart body with its parts in exactly the given order (name, value, filename)."""
    boundary = b"order-test-5b1e"
    body = b""
    for name, value, filename in parts:
        body += b"--" + boundary + b'\r\nContent-Disposition: form-data; name="%s"' % name.encode()
        if filename is not None:
            body += b'; filename="%s"\r\nContent-Type: image/png' % filename.encode()
        body += b"\r\n\r\n" + value + b"\r\n"
    return body + b"--" + boundary + b"--\r\n", "multipart/form-data; boundary=" + boundary.decode()


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        # curl's order: -F image=@in.png -F mask=@mask.png -F prompt=... -F model=...
        (
            "edits",
            [
                ("image", PNG, "in.png"),
                ("mask", MASK, "mask.png"),
                ("prompt", b"add a hat", None),
                ("n", b"2", None),
                ("model", b"dalle2", None),
            ],
        ),
        ("variations", [("image", PNG, "in.png"), ("n", b"2", None), ("model", b"dalle2", None)]),
    ],
)
async def test_files_may_come_before_the_model(
    rig: Rig, path: str, parts: list[tuple[str, bytes, str | None]]
) -> None:
    body, content_type = raw_form(*parts)
    r = await rig.gateway.client.post(
        f"/v1/images/{path}",
        content=body,
        headers={**rig.gateway.auth(rig.key), "content-type": content_type},
    )
    assert r.status_code == 200, r.text
    assert len(r.json()["data"]) == 2
    sent = form_parts(image_requests(rig, path)[-1])
    assert sent["model"] == b"dall-e-2" and sent["image"] == PNG
    assert sent.get("mask") == (MASK if path == "edits" else None)


async def test_model_defaults_to_the_configured_default_image_model(
    database_url: str, tmp_path: Path
) -> None:
    toml = '[images]\ndefault_model = "flux"\n'
    async with images_rig(database_url, tmp_path, extra_toml=toml) as rig:
        with sdk(rig) as client:
            edited = await in_thread(
                lambda: client.images.edit(
                    image=("in.png", PNG, "image/png"), prompt="a hat", response_format="b64_json"
                )
            )
            assert base64.b64decode(edited.data[0].b64_json) == image_for("a hat", 0)

            def create_variation() -> Any:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    return client.images.create_variation(image=("in.png", PNG, "image/png"))

            assert len((await in_thread(create_variation)).data) == 1
        for path in ("edits", "variations"):
            assert form_parts(image_requests(rig, path)[-1])["model"] == b"flux-schnell"
        # A model given still wins.
        r = await post_form(rig, "variations", {"model": "dalle2"}, {"image": ("i.png", PNG)})
        assert r.status_code == 200, r.text
        assert form_parts(image_requests(rig, "variations")[-1])["model"] == b"dall-e-2"
