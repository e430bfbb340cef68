"""POST /v1/chat/completions: plain JSON and SSE streams, to OpenAI-compatible and Anthropic
upstreams. The client's body is forwarded as bytes, only `model` (and, for streams,
`stream_options.include_usage`, so usage is always known) rewritten; Anthropic bodies are
translated both ways."""

from __future__ import annotations

from functools import partial

import msgspec

from actors.relay import FrameSource, OpenAIFrames, Resume
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
from gateway.plugins import flow
from gateway.web.request import Request
from protocol import anthropic
from protocol.errors import UpstreamError
from protocol.openai_chat import ParsedChat, continuation_request, parse_chat_request
from protocol.pricing import estimate_tokens
from protocol.usage import Usage
from services.plugins.pipeline import PluginRun
from services.plugins.stream_guard import GuardedStream
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
        trace = call.ctx.trace
        if trace is not None:
            trace.note_chat(request.model, request.output_limit, parsed.fields.get("temperature"))
        model, price = await admit_model(call, deps, request.model, capability="chat")
        fallbacks: list[ResolvedModel] = []
        if request.fallbacks or (model.route is not None and model.route.fallbacks):
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
            run = flow.start(
                deps.plugins,
                call,
                "chat",
                model,
                request.model,
                body,
                stream=request.stream,
                cache=request.cache,
            )
            stored = None if run is None else await flow.before(run, call)
            if stored is not None:
                out = stored.body if stored.kind == "json" else None
            else:
                if run is not None and run.exchange.redacted:
                    body = run.exchange.body
                    parsed = parse_chat_request(body)
                forward = partial(self._forward, call, body, parsed, price, run)
                out = await attempts(
                    call, deps, model, forward, fallbacks=fallbacks, replayable=claim is None
                )
            if claim is not None:
                # Stored before it is sent, so that an immediate retry finds it.
                state = STREAMED if out is None else COMPLETED
                replay = None if out is None else out.decode()
                await claim.repo.finish(claim.org_id, claim.key, state, replay)
            if stored is not None:
                assert deps.plugins is not None
                await flow.serve_stored(deps.plugins, call, stored, model)
            elif out is not None:
                await call.answer_json(out)
                if run is not None:
                    run.finished(flow.outcome(call, "json", out))
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
        run: PluginRun | None,
        model: ResolvedModel,
    ) -> bytes | None:
        """One attempt on `model` (a deployment, gateway/inference/routing.py): the JSON
        answer to send, or None when a stream was sent."""
        deps = self._deps
        price = call.price_at(model, price)
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
            await self._stream(
                call, client, path, upstream_body, parsed, model, price, len(body), run
            )
            return None
        return await self._json(call, client, path, upstream_body, model, price, run)

    async def _json(
        self,
        call: Call,
        client: UpstreamClient,
        path: str,
        upstream_body: bytes,
        model: ResolvedModel,
        price: ModelConfig | None,
        run: PluginRun | None,
    ) -> bytes:
        # An upstream failure propagates: the boundary maps it (gateway/web/errors.py).
        content, _ = await client.post_json(
            path, upstream_body, api_key=call.own_key, trace=call.trace_headers
        )
        out, usage = chat_answer(content, model)
        if call.ctx.trace is not None:
            call.ctx.trace.note_answer(out)
        out = await flow.answer(run, out)  # output guardrails: a block is not billed
        call.charge(usage, price)
        return out

    async def _stream(
        self,
        call: Call,
        client: UpstreamClient,
        path: str,
        upstream_body: bytes,
        parsed: ParsedChat,
        model: ResolvedModel,
        price: ModelConfig | None,
        body_size: int,
        run: PluginRun | None,
    ) -> None:
        deps = self._deps
        request = parsed.request
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        frames = chat_frames(model, include_usage=include_usage)
        http = call.request
        sink = ClientStream(http)
        guarded = flow.stream(run, sink)
        failover = _Failover(call, deps, parsed, frames, sink, price, body_size)
        try:
            await relay_to_client(
                call,
                deps,
                client,
                path,
                upstream_body,
                frames,
                guarded,
                resume=failover.resume if failover.possible else None,
            )
        finally:
            call.first_byte_at = sink.opened_at
            trace = call.ctx.trace
            if trace is not None:
                reason = getattr(frames, "finish_reason", None)
                trace.finish_reasons = [reason] if isinstance(reason, str) else []
            cut = isinstance(guarded, GuardedStream) and guarded.cut is not None
            # What was relayed is accounted, reported usage when the upstream sent it,
            # otherwise an estimate (the client left, the stream broke, or a plugin cut it:
            # then only what the client got).
            usage = (None if cut else frames.usage) or Usage(
                prompt_tokens=estimate_tokens(failover.prompt_bytes),
                completion_tokens=max(0, sink.frames_sent - failover.frames_before - 1),
            )
            if cut:  # a plugin cut it: the text frames the client got (of this leg)
                assert isinstance(guarded, GuardedStream)
                usage.completion_tokens = min(usage.completion_tokens, guarded.sent_deltas)
            usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
            if http.started:
                if failover.legs:  # each leg at its deployment's price
                    call.charge_legs([*failover.legs, (usage, failover.price)])
                else:
                    call.charge(usage, price)
        if isinstance(guarded, GuardedStream) and run is not None and guarded.cut is None:
            recorded = guarded.recorded if frames.finished else None
            if recorded is not None and sink.ended and not sink.left:
                run.finished(flow.outcome(call, "sse", recorded))


class _Failover:
    """A chat stream's continuation on another deployment when it breaks after its first
    byte (docs/routing.md, "Stream failover"): the deployment routing gives
    (`call.failover`), the continuation request (protocol/openai_chat.continuation_request),
    and the legs so far for billing. Only for an OpenAI-format stream of one choice without
    tool calls (a continuation cannot rebuild a half-sent tool call)."""

    def __init__(
        self,
        call: Call,
        deps: InferenceDeps,
        parsed: ParsedChat,
        frames: FrameSource,
        sink: ClientStream,
        price: ModelConfig | None,
        body_size: int,
    ) -> None:
        self.call = call
        self.deps = deps
        self.parsed = parsed
        self.frames = frames
        self.sink = sink
        self.price = price  # the current leg's
        self.prompt_bytes = body_size  # the current leg's request
        self.frames_before = 0  # frames sent before the current leg
        self.legs: list[tuple[Usage, ModelConfig | None]] = []  # the broken legs
        fields = parsed.fields
        self.possible = (
            call.failover is not None
            and isinstance(frames, OpenAIFrames)
            and bytes(fields.get("n", b"1")) == b"1"
            and "tools" not in fields
            and "functions" not in fields
        )
        if self.possible:
            assert isinstance(frames, OpenAIFrames)
            frames.keep_text()

    async def resume(self, failed: UpstreamError) -> Resume | None:
        call = self.call
        assert call.failover is not None and isinstance(self.frames, OpenAIFrames)
        deployment = await call.failover(failed)
        if deployment is None:
            return None
        sent = self.sink.frames_sent - self.frames_before - 1  # less its opening (role) chunk
        self.legs.append(
            (
                Usage(
                    prompt_tokens=estimate_tokens(self.prompt_bytes),
                    completion_tokens=max(0, sent),
                    total_tokens=estimate_tokens(self.prompt_bytes) + max(0, sent),
                ),
                self.price,
            )
        )
        produced = sum(usage.completion_tokens for usage, _ in self.legs)
        try:
            body = continuation_request(
                self.parsed,
                model=deployment.upstream,
                partial=self.frames.partial_text(),
                produced=produced,
                native=deployment.provider.kind == "vllm",
            )
        except (msgspec.DecodeError, RecursionError):  # messages nested too deep to rebuild
            return None
        self.price = None if self.price is None else deployment.price
        self.prompt_bytes = len(body)
        self.frames_before = self.sink.frames_sent
        client = self.deps.upstreams.get(deployment.provider.name)
        return Resume(
            client,
            "chat/completions",
            body,
            call.own_key,
            carried=produced,
            trace=call.trace_headers,  # the attempt's span goes on (gateway/telemetry/)
        )
