"""Hostile requests to the images routes over plain httpx: each is refused in the OpenAI
error shape with the right status, nothing reaches the provider, and the gateway goes on
answering."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.upstream.image_routes import png
from tests.gateway.images.support import error_of, generate, images_rig
from tests.inference import Rig

PNG = png((1, 2, 3), side=8)


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with images_rig(database_url, tmp_path) as r:
        yield r


async def _raw(
    rig: Rig, path: str, body: bytes, content_type: str
) -> tuple[int, dict[str, object]]:
    r = await rig.gateway.client.post(
        f"/v1/images/{path}",
        content=body,
        headers={**rig.gateway.auth(rig.key), "content-type": content_type},
    )
    return r.status_code, error_of(r)


async def test_hostile_bodies_are_refused_and_the_gateway_goes_on(rig: Rig) -> None:
    before = len(rig.upstream.requests)
    form = "multipart/form-data; boundary=b"
    cases = [
        # A JSON body over the 1 MiB limit.
        (
            "generations",
            b'{"model":"dalle2","prompt":"' + b"x" * 2_000_000 + b'"}',
            "application/json",
            413,
        ),
        # Multipart without a boundary, and a truncated one.
        ("edits", b"--b\r\n", "multipart/form-data", 400),
        ("edits", b'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\ndall', form, 400),
        # A field over the form's field limit.
        (
            "edits",
            b'--b\r\nContent-Disposition: form-data; name="prompt"\r\n\r\n'
            + b"p" * 70_000
            + b"\r\n--b--\r\n",
            form,
            400,
        ),
        # The image twice.
        (
            "variations",
            b"".join(
                b'--b\r\nContent-Disposition: form-data; name="image"; filename="i.png"\r\n\r\n'
                + PNG
                + b"\r\n"
                for _ in range(2)
            )
            + b"--b--\r\n",
            form,
            400,
        ),
        # A part without a name.
        ("variations", b"--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--\r\n", form, 400),
    ]
    for path, body, content_type, status in cases:
        got, error = await _raw(rig, path, body, content_type)
        assert got == status, (path, body[:80], error)
    # A body over the vision limit (20 MB + the form's overhead) declared up front.
    big = await rig.gateway.client.post(
        "/v1/images/variations",
        content=b"x" * 25_000_000,
        headers={**rig.gateway.auth(rig.key), "content-type": form},
    )
    assert big.status_code == 413
    assert len(rig.upstream.requests) == before
    ok = await generate(rig, {"model": "dalle2", "prompt": "still here"})
    assert ok.status_code == 200
