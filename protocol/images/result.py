"""The provider's image result, read strictly: every image must come as `b64_json` holding a
PNG (the gateway asked for b64_json; an upstream answering with a `url` is refused rather than
fetched: the gateway never fetches a URL a provider names, SSRF), and a 400 of the provider's
safety system becomes our `content_policy_violation`. No I/O."""

from __future__ import annotations

import binascii
from base64 import b64decode
from dataclasses import dataclass

import msgspec

from protocol.errors import APIError, UpstreamMalformed, invalid_request

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CONTENT_POLICY = "content_policy_violation"


class _Item(msgspec.Struct):
    b64_json: str | None = None
    url: str | None = None
    revised_prompt: str | None = None


class _Result(msgspec.Struct):
    data: list[_Item]


class _Error(msgspec.Struct):
    code: str | None = None
    message: str | None = None


class _ErrorBody(msgspec.Struct):
    error: _Error


@dataclass(frozen=True)
class GeneratedImage:
    png: bytes
    revised_prompt: str | None


def parse_result(body: bytes, *, most: int) -> list[GeneratedImage]:
    """The images of an upstream answer, at most `most` (more than asked for are dropped:
    never billed, never shown). UpstreamMalformed for anything else than PNGs as b64_json."""
    try:
        result = msgspec.json.decode(body, type=_Result)
    except msgspec.DecodeError as exc:
        raise UpstreamMalformed(f"not an image result: {exc}") from None
    images = []
    for item in result.data[:most]:
        if item.b64_json is None:
            what = "a url" if item.url is not None else "no image"
            raise UpstreamMalformed(f"an image came as {what}, not b64_json")
        try:
            png = b64decode(item.b64_json, validate=True)
        except (binascii.Error, ValueError):
            raise UpstreamMalformed("b64_json is not valid base64") from None
        if not png.startswith(PNG_SIGNATURE):
            raise UpstreamMalformed("an image is not a PNG")
        images.append(GeneratedImage(png, item.revised_prompt))
    if not images:
        raise UpstreamMalformed("no images in the result")
    return images


def content_policy_refusal(status: int, body: bytes) -> APIError | None:
    """Our 400 `content_policy_violation` when the provider's 400 says its safety system
    refused the prompt (OpenAI: error.code "content_policy_violation"); None otherwise."""
    if status != 400:
        return None
    try:
        error = msgspec.json.decode(body, type=_ErrorBody).error
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if error.code != CONTENT_POLICY:
        return None
    return invalid_request(
        "The request was rejected by the provider's safety system: your prompt may contain"
        " content that is not allowed.",
        code=CONTENT_POLICY,
    )
