"""POST /v1/chat/completions: plain JSON and SSE streams, to OpenAI-compatible and Anthropic
upstreams. The client's body is forwarded as bytes, only `model` (and, for streams,
`stream_options.include_usage`, so usage is always known) rewritten; Anthropic bodies are
translated both ways."""

from __future__ import annotations

from functools import partial

from actors.upstream import UpstreamClient
from gateway.config import ModelConfig
from gateway.inference import idempotency
from gateway.inference.admission import admit_fallbacks, admit_model, reserve
from gateway.inference.billing import DEFAULT_OUTPUT_RESERVE_TOKENS
from gateway.inference.call import Call
from gateway.inference.chat_upstream import chat_answer, chat_frames
from gateway.inference.deps import InferenceDeps
from gateway.inference.model_registry import ResolvedModel, highest_prices
from gateway.inference.routing import attempts
from gateway.inference.sse_response import ClientStream
from gateway.inference.streaming import relay_to_client
from gateway.web.request import Request
from protocol import anthropic
from protocol.openai_chat import ChatRequest, ParsedChat, parse_chat_request
from protocol.pricing import estimate_tokens
from protocol.usage import Usage
from storage.idempotency import COMPLETED, STREAMED


class ChatCompletions:
    def __init__(self, deps: InferenceDeps) -> None:
        self._deps = deps

    async def __call__(self, http: Request) -> None:
        deps = self._deps
        call = Call(http)
        body = await http.body()
        parsed = parse_chat_request(body)
        request = parsed.request
        call.ctx.stream = request.stream
        model, price = await admit_model(call, deps, request.model, capability="chat")
        fallbacks = await admit_fallbacks(
            call, deps, model, request.fallbacks or (), capability="chat"
        )
        if fallbacks and price is not None:  # the hold covers whichever model answers
            price = highest_prices(price, [price, *(f.price for f in fallbacks)])
        claim = await idempotency.begin(
            deps.idempotency, call.principal.org_id, request.metadata, body
        )
        if claim is not None and claim.replay is not None:
            http.headers.append((b"idempotent-replayed", b"true"))
            await call.answer_json(claim.replay)
            return
        try:
            await reserve(
                call,
                deps,
                price,
                capability="chat",
                prompt_bytes=len(body),
                output_tokens=request.output_limit or DEFAULT_OUTPUT_RESERVE_TOKENS,
            )
            forward = partial(self._forward, call, body, parsed, price)
            out = await attempts(
                call, deps, model, forward, fallbacks=fallbacks, replayable=claim is None
            )
            if claim is not None:
                # Stored before it is sent, so that an immediate retry finds it.
                state = STREAMED if out is None else COMPLETED
                replay = None if out is None else out.decode()
                await claim.repo.finish(claim.org_id, claim.key, state, replay)
            if out is not None:
                await call.answer_json(out)
        except BaseException:
            call.close_bill()
            if claim is not None:
                await idempotency.end_failed(claim, started=http.started)
            raise

    async def _forward(
        self,
        call: Call,
        body: bytes,
        parsed: ParsedChat,
        price: ModelConfig | None,
        model: ResolvedModel,
    ) -> bytes | None:
        """One attempt on `model` (a deployment, gateway/inference/routing.py): the JSON
        answer to send, or None when a stream was sent."""
        deps = self._deps
        if price is not None and model.price is not price:  # one of several deployments
            assert model.price is not None  # a model with an unpriced deployment has no price
            price = model.price
            if call.bill is not None:
                call.bill.reprice(price)
        request = parsed.request
        client = deps.upstreams.get(model.provider.name)
        if model.provider.kind == "anthropic":
            path = "messages"
            upstream_body = anthropic.to_messages_request(
                body, upstream_model=model.upstream, stream=request.stream
            )
        else:
            path = "chat/completions"
            upstream_body = parsed.rewrite(model=model.upstream, force_include_usage=request.stream)
        if request.stream:
            await self._stream(call, client, path, upstream_body, request, model, price, len(body))
            return None
        return await self._json(call, client, path, upstream_body, model, price)

    async def _json(
        self,
        call: Call,
        client: UpstreamClient,
        path: str,
        upstream_body: bytes,
        model: ResolvedModel,
        price: ModelConfig | None,
    ) -> bytes:
        # An upstream failure propagates: the boundary maps it (gateway/web/errors.py).
        content, _ = await client.post_json(path, upstream_body, api_key=call.own_key)
        out, usage = chat_answer(content, model)
        call.charge(usage, price)
        return out

    async def _stream(
        self,
        call: Call,
        client: UpstreamClient,
        path: str,
        upstream_body: bytes,
        request: ChatRequest,
        model: ResolvedModel,
        price: ModelConfig | None,
        body_size: int,
    ) -> None:
        deps = self._deps
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        frames = chat_frames(model, include_usage=include_usage)
        http = call.request
        sink = ClientStream(http)
        try:
            await relay_to_client(call, deps, client, path, upstream_body, frames, sink)
        finally:
            call.first_byte_at = sink.opened_at
            # What was relayed is accounted, reported usage when the upstream sent it,
            # otherwise an estimate (the client left, or the stream broke).
            usage = frames.usage or Usage(
                prompt_tokens=estimate_tokens(body_size),
                completion_tokens=max(0, sink.frames_sent - 1),  # less the role chunk
            )
            usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
            if http.started:
                call.charge(usage, price)
