"""POST /v1/embeddings, to OpenAI-compatible upstreams (body forwarded, `model` rewritten)."""

from __future__ import annotations

from typing import Any

import msgspec

from actors.upstream import UpstreamError
from gateway.asgi import read_body
from gateway.inference.admission import admit_model, reserve
from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.inference.upstream_errors import upstream_failure
from protocol.decoding import decode_json
from protocol.errors import invalid_request
from protocol.openai_chat import rewrite_model_in_object, rewrite_request
from protocol.scopes import EMBEDDINGS
from protocol.usage import Usage


class EmbeddingsRequest(msgspec.Struct):
    model: str
    input: Any = msgspec.UNSET  # a string, strings, or token arrays: checked for presence only


class Embeddings:
    def __init__(self, deps: InferenceDeps) -> None:
        self._deps = deps

    async def __call__(self, call: Call) -> None:
        deps = self._deps
        await call.authenticate(deps.auth, EMBEDDINGS)
        body = await read_body(call.receive, deps.max_body_bytes)
        request = decode_json(body, EmbeddingsRequest)
        if request.input is msgspec.UNSET or request.input in ("", []):
            raise invalid_request("`input` must be a non-empty string or array.", param="input")
        model, price = await admit_model(call, deps, request.model, capability="embeddings")
        client = deps.upstreams.get(model.provider.name)
        upstream_body = rewrite_request(body, model=model.upstream, force_include_usage=False)
        await reserve(
            call, deps, price, capability="embeddings", prompt_bytes=len(body), output_tokens=0
        )
        try:
            try:
                content, _ = await client.post_json(
                    "embeddings", upstream_body, api_key=call.own_key
                )
            except UpstreamError as exc:
                raise await upstream_failure(call, deps, exc) from None
            out, usage = rewrite_model_in_object(content, model.id)
            call.charge(usage or Usage(), price)
        finally:
            call.close_bill()
        await call.answer_json(out)
