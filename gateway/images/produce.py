"""What generations, edits and variations share once the request is checked: hold n images'
price, call the provider, read its result strictly, store each image (for `url`) or encode it
(for `b64_json`), and charge the images actually returned. Failures release the hold."""

from __future__ import annotations

import logging
from base64 import b64encode
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal

import msgspec

from gateway.images.urls import base_url, image_url
from gateway.inference.admission import reserve_units
from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from protocol.errors import APIError, UpstreamMalformed, UpstreamStatusError
from protocol.images.generation import ImageData, ImageResult
from protocol.images.result import content_policy_refusal, parse_result
from protocol.timefmt import now_us
from services.images import ImageStore

log = logging.getLogger("gateway.images")


@dataclass(frozen=True)
class ImagesDeps:
    inference: InferenceDeps
    store: ImageStore
    public_base_url: str | None  # GATEWAY_PUBLIC_BASE_URL; None: built from Host
    default_model: str | None = None  # [images] default_model: edits and variations


@dataclass(frozen=True)
class Job:
    n: int
    unit_price: Decimal | None  # None with the org's own provider key
    response_format: str  # url or b64_json
    send: Callable[[], Awaitable[bytes]]  # the upstream call: its whole answer body


def bad_response(provider: str) -> APIError:
    return APIError(
        502,
        f"The upstream provider {provider!r} sent a malformed image result.",
        type="upstream_error",
        code="upstream_bad_response",
    )


async def produce(call: Call, deps: ImagesDeps, provider: str, job: Job) -> None:
    """Answer the request with the image result; an exception for every failure (the hold is
    released then; an upstream failure is the boundary's to map). Cancellation: nothing is
    charged; images stored so far expire."""
    base = None
    if job.response_format == "url":  # before the provider is paid: a bad Host fails first
        base = base_url(deps.public_base_url, call.request.header(b"host"))
    await reserve_units(
        call, deps.inference, job.unit_price, capability="images", units=Decimal(job.n)
    )
    try:
        try:
            body = await job.send()
        except UpstreamStatusError as exc:
            refusal = content_policy_refusal(exc.status, exc.body)
            if refusal is not None:
                raise refusal from None
            raise  # the boundary maps it (gateway/web/errors.py)
        try:
            images = parse_result(body, most=job.n)
        except UpstreamMalformed as exc:
            log.warning("provider %s: unusable image result: %s", provider, exc)
            raise bad_response(provider) from None
        now = now_us()
        data = []
        for image in images:
            if base is None:
                data.append(
                    ImageData(
                        b64_json=b64encode(image.png).decode("ascii"),
                        revised_prompt=image.revised_prompt,
                    )
                )
            else:
                token, _ = await deps.store.save(call.principal.org_id, image.png, now=now)
                data.append(
                    ImageData(url=image_url(base, token), revised_prompt=image.revised_prompt)
                )
        call.charge_units(Decimal(len(images)), job.unit_price)
    finally:
        call.close_bill()
    await call.answer_json(msgspec.json.encode(ImageResult(created=now // 1_000_000, data=data)))
