"""The OpenAI images routes: `/v1/images/generations` (JSON), `/edits` and `/variations`
(multipart). Each image is a real, small PNG (built here with zlib and struct), its colour a
function of the prompt and its index, so tests can tell images apart and compare bytes.

Behaviour a test can ask for through the request itself:
- a prompt containing `forbidden` is refused as OpenAI's safety system does: 400 with
  error.code `content_policy_violation`;
- `response_format: url` answers `url`s (under https://images.bench.invalid/, never served),
  and so does a prompt containing `[answer-with-url]` whatever was asked (a provider that
  ignores the field);
- a prompt containing `[one-image]` gets one image whatever `n` asked (a provider that made
  fewer: the gateway charges what came);
- models named like `dall-e-3` (the single-image family) add `revised_prompt`.
Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import struct
import time
import zlib
from base64 import b64encode
from typing import Any

import msgspec

from bench.upstream import forms
from bench.upstream.behavior import RecordedRequest, UpstreamBehavior
from bench.upstream.openai_routes import error_reply
from bench.upstream.replies import JsonReply, Reply

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IMAGE_SIDE = 8  # pixels: small, and still a real image
REFUSED_WORD = "forbidden"
URL_MARKER = "[answer-with-url]"
URL_BASE = "https://images.bench.invalid/"
ONE_IMAGE_MARKER = "[one-image]"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def png(rgb: tuple[int, int, int], side: int = IMAGE_SIDE) -> bytes:
    """A `side` × `side` PNG of one colour (8-bit RGB, no interlace)."""
    row = b"\x00" + bytes(rgb) * side  # filter type 0, then the pixels
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(row * side))
        + _chunk(b"IEND", b"")
    )


def image_for(prompt: str, index: int) -> bytes:
    digest = hashlib.sha256(f"{prompt}\x00{index}".encode()).digest()
    return png((digest[0], digest[1], digest[2]))


def _authorized(request: RecordedRequest) -> bool:
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and bool(credential.strip())


def content_policy_reply() -> JsonReply:
    error = {
        "message": "Your request was rejected as a result of our safety system.",
        "type": "invalid_request_error",
        "param": None,
        "code": "content_policy_violation",
    }
    return JsonReply(400, msgspec.json.encode({"error": error}))


def _result(model: str, prompt: str, n: int, response_format: str) -> Reply:
    if REFUSED_WORD in prompt.lower():
        return content_policy_reply()
    if not 1 <= n <= 10:
        return error_reply(400, "n must be from 1 to 10", param="n")
    as_url = response_format == "url" or URL_MARKER in prompt
    data: list[dict[str, Any]] = []
    for i in range(1 if ONE_IMAGE_MARKER in prompt else n):
        image = image_for(prompt, i)
        item: dict[str, Any] = (
            {"url": URL_BASE + hashlib.sha256(image).hexdigest() + ".png"}
            if as_url
            else {"b64_json": b64encode(image).decode("ascii")}
        )
        if "dall-e-3" in model:
            item["revised_prompt"] = f"A detailed rendering of: {prompt}"
        data.append(item)
    return JsonReply(200, msgspec.json.encode({"created": int(time.time()), "data": data}))


def generations(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    if not _authorized(request):
        return error_reply(401, "missing or malformed Authorization: Bearer header")
    try:
        body = msgspec.json.decode(request.body)
    except msgspec.DecodeError as exc:
        return error_reply(400, str(exc))
    if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
        return error_reply(400, "prompt is required", param="prompt")
    n = body.get("n", 1)
    if not isinstance(n, int):
        return error_reply(400, "n must be an integer", param="n")
    return _result(
        str(body.get("model", "")), body["prompt"], n, str(body.get("response_format", "url"))
    )


def form_parts(request: RecordedRequest) -> dict[str, bytes]:
    """A multipart body's parts by name (the first of each); empty when it is not a form."""
    parts = forms.parse_form(request.headers.get("content-type", ""), request.body) or []
    found: dict[str, bytes] = {}
    for part in parts:
        found.setdefault(part.name, part.data)
    return found


def _uploads(request: RecordedRequest, *, edit: bool) -> Reply:
    if not _authorized(request):
        return error_reply(401, "missing or malformed Authorization: Bearer header")
    parts = form_parts(request)
    image = parts.get("image", b"")
    if not image.startswith(PNG_SIGNATURE):
        return error_reply(400, "image must be a PNG", param="image")
    if edit and "prompt" not in parts:
        return error_reply(400, "prompt is required", param="prompt")
    try:
        n = int(parts.get("n", b"1"))
    except ValueError:
        return error_reply(400, "n must be an integer", param="n")
    prompt = (
        parts["prompt"].decode("utf-8", "replace")
        if edit
        else "variation of " + hashlib.sha256(image).hexdigest()
    )
    return _result(
        parts.get("model", b"").decode("utf-8", "replace"),
        prompt,
        n,
        parts.get("response_format", b"url").decode("utf-8", "replace"),
    )


def edits(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    return _uploads(request, edit=True)


def variations(request: RecordedRequest, behavior: UpstreamBehavior) -> Reply:
    return _uploads(request, edit=False)
