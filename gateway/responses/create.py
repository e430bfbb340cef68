"""POST /v1/responses: a response from any chat provider (OpenAI-compatible or Anthropic), by
translating to chat completions and back, JSON or SSE; stored (when `store` is true) before
the answer is sent, so it is readable at once on every instance.

The steps are chat's (gateway/inference/chat.py): admit the model (capability `responses`:
usage rows read `Responses: <model>`), build the context from the stored chain, reserve,
call the upstream, charge what it reports, answer. A stream is charged for what was relayed
and stored only when it completed (a client that left gets nothing stored).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import msgspec

from actors.upstream import UpstreamClient
from gateway.config import ModelConfig
from gateway.inference.admission import admit_model, reserve
from gateway.inference.billing import DEFAULT_OUTPUT_RESERVE_TOKENS
from gateway.inference.call import Call
from gateway.inference.chat_upstream import chat_answer, chat_frames
from gateway.inference.model_registry import ResolvedModel
from gateway.inference.routing import attempts
from gateway.inference.sse_response import ClientStream
from gateway.inference.streaming import relay_to_client
from gateway.plugins import flow
from gateway.responses.context import build_context
from gateway.responses.deps import ResponsesDeps
from gateway.web.request import Request
from protocol import anthropic
from protocol.errors import UpstreamMalformed, invalid_request
from protocol.pricing import estimate_tokens
from protocol.responses.from_chat import response_from_chat
from protocol.responses.native import NativeStream, native_request, native_response
from protocol.responses.objects import ResponseObject, encode_response, new_response_id
from protocol.responses.request import (
    ResponsesRequest,
    parse_responses_request,
    refuse_builtin_tools,
)
from protocol.responses.stream import ResponseStream
from protocol.responses.to_chat import encode_chat_request
from protocol.usage import Usage
from services.plugins.pipeline import PluginRun
from services.plugins.stream_guard import GuardedStream

encode_json = msgspec.json.encode

CAPABILITY = "responses"
MAX_CONTEXT_BYTES = 32 * 1024 * 1024  # the chat request a chain may grow to


class CreateResponse:
    def __init__(self, deps: ResponsesDeps) -> None:
        self._deps = deps

    async def __call__(self, http: Request) -> None:
        deps = self._deps.inference
        call = Call(http)
        body = await http.body()
        request = parse_responses_request(body)
        call.ctx.stream = request.stream
        model, price = await admit_model(call, deps, request.model, capability=CAPABILITY)
        if not is_native(model):
            refuse_builtin_tools(request)
        org_id = call.principal.org_id
        run = flow.start(deps.plugins, call, "responses", model, request.model, body)
        if run is not None:
            run.exchange.stream = request.stream
            await flow.before(run, call)  # the cache does not answer Responses
            if run.exchange.redacted:
                request = parse_responses_request(run.exchange.body)
        context = await build_context(self._deps.store, org_id, request)
        created_us = self._deps.store.clock()
        skeleton = _skeleton(request, model.id, created_us)
        first = _upstream_request(request, context, model)
        try:
            await reserve(
                call,
                deps,
                price,
                capability=CAPABILITY,
                prompt_bytes=len(first[1]),
                output_tokens=request.max_output_tokens or DEFAULT_OUTPUT_RESERVE_TOKENS,
            )
            save = None
            if request.stream and request.store:
                save = partial(self._deps.store.save, org_id, input=context, created_us=created_us)

            async def attempt(deployment: ResolvedModel) -> ResponseObject | dict[str, Any] | None:
                """One attempt on a deployment (gateway/inference/routing.py)."""
                path, upstream_body = (
                    first
                    if deployment is model
                    else _upstream_request(request, context, deployment)
                )
                charged = call.price_at(deployment, price)
                client = deps.upstreams.get(deployment.provider.name)
                if request.stream:
                    await self._stream(
                        call, client, path, upstream_body, deployment, charged, skeleton, save, run
                    )
                    return None
                return await self._json(
                    call, client, path, upstream_body, deployment, charged, skeleton, run
                )

            final = await attempts(call, deps, model, attempt)
        except BaseException:
            call.close_bill()
            raise
        if final is None:
            return
        if request.store:
            await self._deps.store.save(org_id, final, input=context, created_us=created_us)
        answer = encode_response(final) if isinstance(final, ResponseObject) else encode_json(final)
        await call.answer_json(answer)
        if run is not None:
            run.finished(flow.outcome(call, "json", answer))

    async def _json(
        self,
        call: Call,
        client: UpstreamClient,
        path: str,
        upstream_body: bytes,
        model: ResolvedModel,
        price: ModelConfig | None,
        skeleton: ResponseObject,
        run: PluginRun | None,
    ) -> ResponseObject | dict[str, Any]:
        completed_at = self._deps.store.clock() // 1_000_000
        response: ResponseObject | dict[str, Any]
        content, _ = await client.post_json(
            path, upstream_body, api_key=call.own_key, trace=call.trace_headers
        )
        try:
            if is_native(model):
                response, usage = native_response(content, skeleton, completed_at=completed_at)
            else:
                chat, usage = chat_answer(content, model)
                response = response_from_chat(
                    chat, skeleton, usage=usage, completed_at=completed_at
                )
        except UpstreamMalformed as exc:  # not a chat completion or a response
            raise exc.named(model.provider.name) from None
        if run is not None:  # output guardrails: a block is not billed
            encoded = (
                encode_response(response)
                if isinstance(response, ResponseObject)
                else encode_json(response)
            )
            checked = await flow.answer(run, encoded)
            if checked is not encoded:  # redacted
                response = msgspec.json.decode(checked)
        # Charged once translated: the upstream did the work whatever happens next.
        call.charge(usage, price)
        return response

    async def _stream(
        self,
        call: Call,
        client: UpstreamClient,
        path: str,
        upstream_body: bytes,
        model: ResolvedModel,
        price: ModelConfig | None,
        skeleton: ResponseObject,
        save: Callable[[ResponseObject | dict[str, Any]], Awaitable[None]] | None,
        run: PluginRun | None,
    ) -> None:
        """Relay the stream; with `save`, the completed response is stored before its last
        frames (`response.completed`, `[DONE]`) leave, so a client that saw them can
        retrieve or continue it at once."""
        deps = self._deps.inference
        clock = self._deps.store.clock
        frames: ResponseStream | NativeStream
        if is_native(model):
            frames = NativeStream(skeleton, clock=lambda: clock() / 1_000_000)
        else:
            inner = chat_frames(model, include_usage=True)
            frames = ResponseStream(inner, skeleton, clock=lambda: clock() / 1_000_000)
        http = call.request
        sink = ClientStream(http, hold_last=save is not None)

        guarded = flow.stream(run, sink, lambda message, code, _: frames.cut(message, code=code))

        async def before_last() -> None:
            final = frames.response
            # Stored like a JSON answer: completed, or incomplete (cut at max_output_tokens);
            # never once a plugin cut it, and as the client got it (redacted).
            if isinstance(guarded, GuardedStream):
                if guarded.cut is not None:
                    return
                if final is not None:
                    final = guarded.as_sent(final)
            if save is not None and frames.finished and final is not None:
                status = final["status"] if isinstance(final, dict) else final.status
                if status in ("completed", "incomplete"):
                    await save(final)

        try:
            await relay_to_client(
                call, deps, client, path, upstream_body, frames, guarded, before_last=before_last
            )
        finally:
            # What was relayed is accounted, as for chat: reported usage when the upstream
            # sent it, otherwise an estimate (the client left, the stream broke, or a plugin
            # cut it: then the text frames the client got).
            cut = isinstance(guarded, GuardedStream) and guarded.cut is not None
            usage = (None if cut else frames.usage) or Usage(
                prompt_tokens=estimate_tokens(len(upstream_body)),
                completion_tokens=guarded.sent_deltas
                if isinstance(guarded, GuardedStream) and cut
                else frames.deltas,
            )
            usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
            if http.started:
                call.charge(usage, price)
        if run is not None and isinstance(guarded, GuardedStream):
            if guarded.cut is None and frames.finished and sink.ended and not sink.left:
                run.finished(flow.outcome(call, "sse", guarded.recorded or b""))


def _upstream_request(
    request: ResponsesRequest, context: list[dict[str, Any]], model: ResolvedModel
) -> tuple[str, bytes]:
    """The path and body the Responses request becomes for `model`'s provider: passed as it is
    to one that speaks Responses itself, else translated to chat (or to Anthropic's
    messages). 400 `context_too_long` past what one request may carry."""
    if is_native(model):
        chat = native_request(request, context, model=model.upstream)
    else:
        chat = encode_chat_request(request, context, model=model.upstream)
    if len(chat) > MAX_CONTEXT_BYTES:
        raise invalid_request(
            "The conversation has grown past what one request may carry; start a new one.",
            param="previous_response_id",
            code="context_too_long",
        )
    if is_native(model):
        return "responses", chat
    if model.provider.kind == "anthropic":
        return "messages", anthropic.to_messages_request(
            chat, upstream_model=model.upstream, stream=request.stream
        )
    return "chat/completions", chat


def is_native(model: ResolvedModel) -> bool:
    """The provider speaks Responses itself (`supports` lists `responses`; never the
    anthropic kind, whose API is Messages)."""
    supports = model.provider.supports
    return model.provider.kind != "anthropic" and supports is not None and "responses" in supports


def _skeleton(request: ResponsesRequest, model_id: str, created_us: int) -> ResponseObject:
    tool_choice: str | dict[str, Any] = request.response_tool_choice
    return ResponseObject(
        id=new_response_id(),
        created_at=created_us // 1_000_000,
        model=model_id,
        instructions=request.instructions,
        max_output_tokens=request.max_output_tokens,
        parallel_tool_calls=request.parallel_tool_calls,
        previous_response_id=request.previous_response_id,
        store=request.store,
        temperature=request.temperature,
        tool_choice=tool_choice,
        tools=request.response_tools,
        top_p=request.top_p,
        metadata=request.metadata,
    )
