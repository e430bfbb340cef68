"""protocol/images: families by upstream name, the generation checks, the unit price's
precedence, PNG uploads, the provider's result read strictly, the upstream form."""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import msgspec
import pytest

from bench.upstream.image_routes import png
from protocol.errors import APIError, UpstreamMalformed
from protocol.images.families import DIFFUSION, MULTI_IMAGE, SINGLE_IMAGE, family_of
from protocol.images.form import FilePart, UpstreamForm
from protocol.images.generation import (
    ImageGenerationRequest,
    check_generation,
    upstream_generation,
)
from protocol.images.png import check_png
from protocol.images.pricing import image_unit_price
from protocol.images.result import content_policy_refusal, parse_result


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("dall-e-3", SINGLE_IMAGE),
        ("DALL-E-3-preview", SINGLE_IMAGE),
        ("dall-e-2", MULTI_IMAGE),
        ("gpt-image-1", MULTI_IMAGE),
        ("stable-diffusion-xl", DIFFUSION),
        ("black-forest-labs/FLUX.1-schnell", DIFFUSION),
        ("sdxl-turbo", DIFFUSION),
        ("some-new-model", MULTI_IMAGE),
    ],
)
def test_family_by_upstream_name(name: str, family: object) -> None:
    assert family_of(name) is family


def _request(**fields: object) -> ImageGenerationRequest:
    return msgspec.convert({"model": "m", "prompt": "p", **fields}, ImageGenerationRequest)


def test_defaults_are_the_spec_ones() -> None:
    r = _request()
    assert (r.size, r.n, r.quality, r.response_format, r.style) == (
        "1024x1024",
        1,
        "standard",
        "url",
        None,
    )


@pytest.mark.parametrize(
    ("family", "fields", "param"),
    [
        (SINGLE_IMAGE, {"prompt": "x" * 4001}, "prompt"),
        (SINGLE_IMAGE, {"n": 2}, "n"),
        (MULTI_IMAGE, {"n": 11}, "n"),
        (DIFFUSION, {"n": 0}, "n"),
        (SINGLE_IMAGE, {"size": "512x512"}, "size"),
        (MULTI_IMAGE, {"quality": "hd"}, "quality"),
        (MULTI_IMAGE, {"style": "vivid"}, "style"),
        (SINGLE_IMAGE, {"style": "loud"}, "style"),
        (SINGLE_IMAGE, {"negative_prompt": "x"}, "negative_prompt"),
        (MULTI_IMAGE, {"seed": 3}, "seed"),
        (SINGLE_IMAGE, {"aspect_ratio": "1:1"}, "aspect_ratio"),
        (DIFFUSION, {"seed": 2**32}, "seed"),
        (DIFFUSION, {"aspect_ratio": "1:7"}, "aspect_ratio"),
    ],
)
def test_refusals_name_the_param(family: object, fields: dict[str, object], param: str) -> None:
    with pytest.raises(APIError) as caught:
        check_generation(_request(**fields), family)  # type: ignore[arg-type]
    assert caught.value.status == 400 and caught.value.param == param


def test_accepted_at_the_limits() -> None:
    check_generation(_request(prompt="x" * 4000, style="natural", quality="hd"), SINGLE_IMAGE)
    check_generation(_request(n=10, size="512x512"), MULTI_IMAGE)
    check_generation(
        _request(n=10, negative_prompt="n", seed=2**32 - 1, aspect_ratio="21:9"), DIFFUSION
    )


def test_upstream_body_rewrites_the_model_and_asks_for_b64() -> None:
    body = json.loads(upstream_generation(_request(response_format="url", seed=0, user="u"), "up"))
    assert body == {
        "model": "up",
        "prompt": "p",
        "n": 1,
        "size": "1024x1024",
        "response_format": "b64_json",
        "seed": 0,
    }


def test_unit_price_most_specific_first() -> None:
    by = (("1024x1792", Decimal("0.08")), ("1024x1792/hd", Decimal("0.12")))
    price = Decimal("0.04")
    kw = {"model": "m"}
    assert image_unit_price(by, price, size="1024x1792", quality="hd", **kw) == Decimal("0.12")
    assert image_unit_price(by, price, size="1024x1792", quality="standard", **kw) == Decimal(
        "0.08"
    )
    assert image_unit_price(by, price, size="1024x1024", quality="hd", **kw) == price
    with pytest.raises(APIError) as caught:
        image_unit_price(by, None, size="1024x1024", quality="standard", **kw)
    assert caught.value.code == "model_price_unknown"


def test_png_checks() -> None:
    assert check_png(png((1, 2, 3), 16), "image").width == 16
    for bad in (b"", b"GIF89a" + b"\0" * 30, png((1, 2, 3))[:-12]):
        with pytest.raises(APIError) as caught:
            check_png(bad, "mask")
        assert caught.value.param == "mask"


def _result(*items: dict[str, str]) -> bytes:
    return json.dumps({"created": 1, "data": list(items)}).encode()


def test_result_is_read_strictly() -> None:
    image = png((9, 9, 9))
    b64 = base64.b64encode(image).decode()
    got = parse_result(_result({"b64_json": b64, "revised_prompt": "r"}, {"b64_json": b64}), most=1)
    assert [(g.png, g.revised_prompt) for g in got] == [(image, "r")]  # more than asked: dropped
    for bad in (
        b"nope",
        _result(),
        _result({"url": "http://169.254.169.254/latest"}),
        _result({"b64_json": "***"}),
        _result({"b64_json": base64.b64encode(b"GIF89a").decode()}),
    ):
        with pytest.raises(UpstreamMalformed):
            parse_result(bad, most=2)


def test_content_policy_refusal_is_recognised_only_as_such() -> None:
    body = json.dumps({"error": {"code": "content_policy_violation", "message": "x"}}).encode()
    refusal = content_policy_refusal(400, body)
    assert refusal is not None and refusal.code == "content_policy_violation"
    assert content_policy_refusal(500, body) is None
    assert content_policy_refusal(400, b'{"error": {"code": "other"}}') is None
    assert content_policy_refusal(400, b"<html>") is None


def test_upstream_form() -> None:
    form = UpstreamForm([("model", "up")], [FilePart("image", b"\x89PNG data")])
    body = b"".join(form.pieces())
    assert form.content_type.endswith(form.boundary)
    assert body.count(form.boundary.encode()) == 3
    assert (
        b'name="image"; filename="image.png"\r\nContent-Type: image/png\r\n\r\n\x89PNG data' in body
    )
