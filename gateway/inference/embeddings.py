"""POST /v1/embeddings, to OpenAI-compatible upstreams (body forwarded, `model` rewritten)."""

from __future__ import annotations

from gateway.inference.admission import admit_fallbacks, admit_model, reserve
from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.inference.model_registry import ResolvedModel, highest_prices
from gateway.inference.routing import attempts
from gateway.plugins import flow
from gateway.plugins.flow import outcome
from gateway.web.request import Request
from protocol.decoding import decode_json
from protocol.errors import UpstreamMalformed, invalid_request
from protocol.openai_chat import rewrite_model_in_object, rewrite_request
from protocol.openai_schema import EmbeddingsRequest
from protocol.usage import Usage


class Embeddings:
    def __init__(self, deps: InferenceDeps) -> None:
        self._deps = deps

    async def __call__(self, http: Request) -> None:
        deps = self._deps
        call = Call(http)
        body = await http.body()
        request = decode_json(body, EmbeddingsRequest)
        if request.input in ("", []):
            raise invalid_request("`input` must be a non-empty string or array.", param="input")
        model, price = await admit_model(call, deps, request.model, capability="embeddings")
        fallbacks: list[ResolvedModel] = []
        if request.fallbacks or (model.route is not None and model.route.fallbacks):
            fallbacks = await admit_fallbacks(
                call, deps, model, request.fallbacks or (), capability="embeddings"
            )
            if fallbacks and price is not None:  # the hold covers whichever model answers
                price = highest_prices(price, [price, *(f.price for f in fallbacks)])
        await reserve(
            call, deps, price, capability="embeddings", prompt_bytes=len(body), output_tokens=0
        )
        run = flow.start(
            deps.plugins, call, "embeddings", model, request.model, body, cache=request.cache
        )
        if run is not None:
            try:
                stored = await flow.before(run, call)
            except BaseException:
                call.close_bill()
                raise
            if stored is not None:
                assert deps.plugins is not None
                await flow.serve_stored(deps.plugins, call, stored, model)
                return
            body = run.exchange.body  # redacted, if a guardrail said so

        async def embed(deployment: ResolvedModel) -> bytes:
            """One attempt on a deployment (gateway/inference/routing.py)."""
            charged = call.price_at(deployment, price)
            client = deps.upstreams.get(deployment.provider.name)
            upstream_body = rewrite_request(
                body, model=deployment.upstream, force_include_usage=False
            )
            content, _ = await client.post_json(
                "embeddings", upstream_body, api_key=call.own_key, trace=call.trace_headers
            )
            try:
                out, usage = rewrite_model_in_object(content, deployment.id)
            except UpstreamMalformed as exc:  # valid HTTP, but not an embeddings list
                raise exc.named(deployment.provider.name) from None
            call.charge(usage or Usage(), charged)
            return out

        try:
            out = await attempts(call, deps, model, embed, fallbacks=fallbacks)
        finally:
            call.close_bill()
        await call.answer_json(out)
        if run is not None:
            run.finished(outcome(call, "json", out))
