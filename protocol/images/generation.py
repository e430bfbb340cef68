"""`POST /v1/images/generations`: the request, checked against the model's family, and the
body sent upstream (always `response_format: b64_json`, so that the gateway holds the bytes
it answers with or stores). No I/O."""

from __future__ import annotations

from typing import Literal

import msgspec

from protocol.errors import APIError, invalid_request
from protocol.images.families import ASPECT_RATIOS, SIZES, Family

ResponseFormat = Literal["url", "b64_json"]
MAX_NEGATIVE_PROMPT_CHARS = 4000
MAX_SEED = 2**32 - 1


class ImageGenerationRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Every field the API has; anything else is refused (400 naming it)."""

    model: str
    prompt: str
    size: str = "1024x1024"
    n: int = 1
    quality: str = "standard"
    style: str | None = None  # vivid by default, single-image family only
    response_format: ResponseFormat = "url"
    negative_prompt: str | None = None
    seed: int | None = None
    aspect_ratio: str | None = None
    user: str | None = None  # OpenAI's end-user tag: accepted, not forwarded


class ImageData(msgspec.Struct, omit_defaults=True):
    url: str | None = None
    b64_json: str | None = None
    revised_prompt: str | None = None


class ImageResult(msgspec.Struct):
    """The API's image result: also the answer of edits and variations."""

    created: int
    data: list[ImageData]


def unsupported(param: str, family: Family) -> APIError:
    return invalid_request(
        f"`{param}` is not supported by models of the {family.name} family.",
        param=param,
        code="unsupported_parameter",
    )


def check_prompt(prompt: str, family: Family, *, param: str = "prompt") -> None:
    if not prompt.strip():
        raise invalid_request("`prompt` must not be empty.", param=param)
    if len(prompt) > family.max_prompt_chars:
        raise invalid_request(
            f"`prompt` is {len(prompt)} characters; models of the {family.name} family take at"
            f" most {family.max_prompt_chars}.",
            param=param,
            code="prompt_too_long",
        )


def check_n(n: int, family: Family) -> None:
    if not 1 <= n <= family.max_n:
        allowed = "1" if family.max_n == 1 else f"from 1 to {family.max_n}"
        raise invalid_request(
            f"`n` must be {allowed} for models of the {family.name} family.", param="n"
        )


def check_size(size: str, family: Family) -> None:
    if size not in family.sizes:
        known = "" if size in SIZES else " (not a known size)"
        raise invalid_request(
            f"`size` {size!r}{known} is not available for models of the {family.name} family;"
            f" one of {', '.join(family.sizes)}.",
            param="size",
        )


def check_generation(request: ImageGenerationRequest, family: Family) -> None:
    """400 naming the first field the family does not take, or takes no such value of."""
    check_prompt(request.prompt, family)
    check_n(request.n, family)
    check_size(request.size, family)
    if request.quality not in family.qualities:
        raise invalid_request(
            f"`quality` must be one of {', '.join(family.qualities)} for models of the"
            f" {family.name} family.",
            param="quality",
        )
    if request.style is not None:
        if not family.style:
            raise unsupported("style", family)
        if request.style not in ("vivid", "natural"):
            raise invalid_request("`style` must be vivid or natural.", param="style")
    for param in ("negative_prompt", "seed", "aspect_ratio"):
        if getattr(request, param) is not None and not family.diffusion_params:
            raise unsupported(param, family)
    if request.negative_prompt is not None and (
        len(request.negative_prompt) > MAX_NEGATIVE_PROMPT_CHARS
    ):
        raise invalid_request(
            f"`negative_prompt` takes at most {MAX_NEGATIVE_PROMPT_CHARS} characters.",
            param="negative_prompt",
        )
    if request.seed is not None and not 0 <= request.seed <= MAX_SEED:
        raise invalid_request(f"`seed` must be from 0 to {MAX_SEED}.", param="seed")
    if request.aspect_ratio is not None and request.aspect_ratio not in ASPECT_RATIOS:
        raise invalid_request(
            f"`aspect_ratio` must be one of {', '.join(ASPECT_RATIOS)}.", param="aspect_ratio"
        )


def upstream_generation(request: ImageGenerationRequest, upstream_model: str) -> bytes:
    """The body for the provider: the checked fields, the upstream model name, b64_json."""
    body: dict[str, object] = {
        "model": upstream_model,
        "prompt": request.prompt,
        "n": request.n,
        "size": request.size,
        "response_format": "b64_json",
    }
    if request.quality != "standard":
        body["quality"] = request.quality
    for param in ("style", "negative_prompt", "seed", "aspect_ratio"):
        value = getattr(request, param)
        if value is not None:
            body[param] = value
    return msgspec.json.encode(body)
