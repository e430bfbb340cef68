"""POST /v1/images/edits and /v1/images/variations (multipart). The images are held (each a
square PNG of at most 4 MB: protocol/images/png.py), checked, then sent upstream in a form the
gateway builds itself (model rewritten, `response_format: b64_json`) through
`post_streamed` (docs/decisions.md, "Images: uploads")."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from actors.upstream import mapped_errors
from gateway.images.produce import ImagesDeps, Job, produce
from gateway.inference.admission import admit_model
from gateway.inference.call import Call
from gateway.web.multipart import MultipartLimits, Part
from gateway.web.request import Request
from protocol.errors import invalid_request
from protocol.images.families import Family, family_of
from protocol.images.form import FilePart, UpstreamForm
from protocol.images.generation import check_n, check_prompt, check_size
from protocol.images.png import MAX_UPLOAD_BYTES, check_png
from protocol.images.pricing import image_unit_price

FORM_LIMITS = MultipartLimits(max_parts=16)
_FILES = ("image", "mask")
_EDIT_FIELDS = frozenset({"model", "prompt", "size", "n", "response_format", "user"})
_VARIATION_FIELDS = frozenset({"model", "size", "n", "response_format", "user"})


async def _read_file(part: Part) -> bytes:
    data = bytearray()
    async for piece in part:
        if len(data) + len(piece) > MAX_UPLOAD_BYTES:
            raise invalid_request(
                f"`{part.name}` is larger than {MAX_UPLOAD_BYTES} bytes (4 MB).",
                param=part.name,
                code="file_too_large",
            )
        data += piece
    return bytes(data)


async def _read_form(
    http: Request, allowed: frozenset[str], default_model: str | None
) -> tuple[dict[str, str], dict[str, bytes]]:
    """The form's fields and files, in any order (the images are held: at most 4 MB each);
    400 naming an unknown, repeated or missing part. Without `model`, `default_model`."""
    fields: dict[str, str] = {}
    files: dict[str, bytes] = {}
    async with http.multipart(FORM_LIMITS) as form:
        async for part in form:
            name = part.name
            if name in fields or name in files:
                raise invalid_request(f"`{name}` is given more than once.", param=name)
            if name in _FILES and (name == "image" or "prompt" in allowed):
                files[name] = await _read_file(part)
            elif name in allowed:
                fields[name] = await part.text()
            else:
                raise invalid_request(
                    f"Unknown parameter: `{name}`.", param=name, code="unknown_parameter"
                )
    if "model" not in fields and default_model is not None:
        fields["model"] = default_model  # as OpenAI's API: `model` may be omitted
    for required in ("model", "prompt") if "prompt" in allowed else ("model",):
        if required not in fields:
            detail = " (no default image model is configured)" if required == "model" else ""
            raise invalid_request(f"`{required}` is required{detail}.", param=required)
    if "image" not in files:
        raise invalid_request("`image` is required.", param="image")
    return fields, files


def _n(fields: dict[str, str]) -> int:
    text = fields.get("n", "1").strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 3:
        raise invalid_request("`n` must be an integer.", param="n")
    return int(text)


def _response_format(fields: dict[str, str]) -> str:
    value = fields.get("response_format", "url")
    if value not in ("url", "b64_json"):
        raise invalid_request("`response_format` must be url or b64_json.", param="response_format")
    return value


def _check_family(family: Family, model_id: str, what: str) -> None:
    if not family.edits:
        raise invalid_request(
            f"The model {model_id!r} ({family.name} family) does not do image {what}.",
            param="model",
            code="unsupported_model",
        )


async def _chunks(pieces: Iterable[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


class ImageUploads:
    """One handler per route: `edits` (image, optional mask, prompt) and `variations`."""

    def __init__(self, deps: ImagesDeps) -> None:
        self._deps = deps

    async def edits(self, http: Request) -> None:
        await self._handle(http, edit=True)

    async def variations(self, http: Request) -> None:
        await self._handle(http, edit=False)

    async def _handle(self, http: Request, *, edit: bool) -> None:
        deps = self._deps
        call = Call(http)
        fields, files = await _read_form(
            http, _EDIT_FIELDS if edit else _VARIATION_FIELDS, deps.default_model
        )
        n, size = _n(fields), fields.get("size", "1024x1024")
        response_format = _response_format(fields)
        model, price = await admit_model(call, deps.inference, fields["model"], capability="images")
        family = family_of(model.upstream)
        _check_family(family, model.id, "edits" if edit else "variations")
        if edit:
            check_prompt(fields["prompt"], family)
        check_n(n, family)
        check_size(size, family)
        image = check_png(files["image"], "image")
        if "mask" in files and check_png(files["mask"], "mask") != image:
            raise invalid_request(
                "`mask` must have the dimensions of `image`.", param="mask", code="invalid_image"
            )
        unit_price = None
        if price is not None:
            unit_price = image_unit_price(
                price.usd_per_image_by,
                price.usd_per_image,
                model=model.id,
                size=size,
                quality="standard",
            )
        upstream_fields = [("model", model.upstream)]
        if edit:
            upstream_fields.append(("prompt", fields["prompt"]))
        upstream_fields += [("n", str(n)), ("size", size), ("response_format", "b64_json")]
        form = UpstreamForm(
            upstream_fields,
            [
                FilePart(name, files[name], filename=f"{name}.png")
                for name in _FILES
                if name in files
            ],
        )
        client = deps.inference.upstreams.get(model.provider.name)
        path = "images/edits" if edit else "images/variations"

        async def send() -> bytes:
            async with client.post_streamed(
                path, _chunks(form.pieces()), content_type=form.content_type, api_key=call.own_key
            ) as response:
                with mapped_errors(client.name):
                    return await response.read(client.max_response_bytes)

        await produce(call, deps, model.provider.name, Job(n, unit_price, response_format, send))
