"""POST /v1/images/generations (JSON): checked against the model's family
(protocol/images/), sent upstream with the model rewritten and `response_format: b64_json`."""

from __future__ import annotations

from gateway.images.produce import ImagesDeps, Job, produce
from gateway.inference.admission import admit_model
from gateway.inference.call import Call
from gateway.plugins import flow
from gateway.web.request import Request
from protocol.decoding import decode_json
from protocol.images.families import family_of
from protocol.images.generation import (
    ImageGenerationRequest,
    check_generation,
    upstream_generation,
)
from protocol.images.pricing import image_unit_price


class Generations:
    def __init__(self, deps: ImagesDeps) -> None:
        self._deps = deps

    async def __call__(self, http: Request) -> None:
        deps = self._deps
        call = Call(http)
        body = await http.body()
        request = decode_json(body, ImageGenerationRequest)
        model, price = await admit_model(call, deps.inference, request.model, capability="images")
        plugins = deps.inference.plugins
        checked = await flow.checked_body(plugins, call, "images", model, request.model, body)
        if checked is not body:  # a guardrail redacted the prompt
            request = decode_json(checked, ImageGenerationRequest)
        family = family_of(model.upstream)
        check_generation(request, family)
        unit_price = None
        if price is not None:
            unit_price = image_unit_price(
                price.usd_per_image_by,
                price.usd_per_image,
                model=model.id,
                size=request.size,
                quality=request.quality,
            )
        client = deps.inference.upstreams.get(model.provider.name)
        upstream_body = upstream_generation(request, model.upstream)

        async def send() -> bytes:
            content, _ = await client.post_json(
                "images/generations", upstream_body, api_key=call.own_key
            )
            return content

        await produce(
            call,
            deps,
            model.provider.name,
            Job(request.n, unit_price, request.response_format, send),
        )
