"""The steps an inference route takes through the plugins (services/plugins/), the same for
every route: `start` once the request is admitted and held; `before` (refused, rewritten, or
answered from the cache: `serve_stored`); `answer` for a JSON answer before it is billed;
`stream` around the client's SSE stream; `finished` once the client has a whole answer.
Findings become the client's errors here: a block 400 `guardrail_blocked`, a `fail_closed`
plugin that failed 503 `plugin_unavailable`."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Literal

from gateway.inference.billing import provider_cost
from gateway.inference.call import Call
from gateway.inference.model_registry import ResolvedModel
from gateway.inference.sse_response import ClientStream
from gateway.plugins.build import Plugins
from protocol.errors import APIError
from protocol.openai_chat import error_frame
from protocol.sse import DONE
from protocol.usage import Usage
from services.plugins.interface import Blocked, Exchange, Outcome, PluginUnavailable, Stored
from services.plugins.pipeline import PluginRun
from services.plugins.stream_guard import CutFrames, GuardedStream

_NO_CACHE = ("no-cache", "no-store")


def plugin_error(exc: Blocked | PluginUnavailable) -> APIError:
    if isinstance(exc, Blocked):
        return APIError(400, str(exc), type="invalid_request_error", code="guardrail_blocked")
    return APIError(
        503, str(exc), type="server_error", code="plugin_unavailable", headers={"Retry-After": "1"}
    )


def model_name(requested: str, model: ResolvedModel) -> str:
    """The `[[models]]` id plugins are configured by: the name the client gave when it is one,
    else the model's first (`provider/upstream` names of a configured model)."""
    if requested in model.aliases:
        return requested
    return model.aliases[0] if model.aliases else model.id  # a routed model's id is its own


def start(
    plugins: Plugins | None,
    call: Call,
    route: str,
    model: ResolvedModel,
    requested: str,
    body: bytes,
    *,
    stream: bool = False,
    cache: bool | None = None,
) -> PluginRun | None:
    """The request's run through the plugins that apply to it, or None (most requests)."""
    if plugins is None or plugins.pipeline is None:
        return None
    name = model_name(requested, model)
    if not plugins.pipeline.applying(route, name):
        return None  # most requests: nothing to build
    control = (call.request.header(b"cache-control") or "").lower()
    exchange = Exchange(
        route=route,
        model=name,
        org_id=call.principal.org_id,
        key_id=call.principal.key_id,
        request_id=call.ctx.request_id,
        stream=stream,
        body=body,
        own_key=call.own_key is not None,
        cache_opt=cache,
        no_cache=any(word in control for word in _NO_CACHE) or not _key_caches(call),
    )
    return plugins.pipeline.start(exchange)


def _key_caches(call: Call) -> bool:
    """The calling key has not opted out of the response cache (management keys never do)."""
    key = call.principal.key
    return key is None or key.cache


async def before(run: PluginRun, call: Call) -> Stored | None:
    """The `before` hooks; their headers (`x-gateway-cache`) go on the answer."""
    try:
        return await run.before()
    except (Blocked, PluginUnavailable) as exc:
        raise plugin_error(exc) from None
    finally:
        call.request.headers.extend(run.exchange.headers)


async def checked_body(
    plugins: Plugins | None,
    call: Call,
    route: str,
    model: ResolvedModel,
    requested: str,
    body: bytes,
) -> bytes:
    """The body after the input plugins, for a route the cache does not answer (images,
    speech, rerank): refused (APIError), redacted (a new body), or as it was (`body` itself)."""
    run = start(plugins, call, route, model, requested, body)
    if run is None:
        return body
    await before(run, call)
    return run.exchange.body


async def answer(run: PluginRun | None, body: bytes) -> bytes:
    """A JSON answer through the output checks and `after` hooks."""
    if run is None:
        return body
    try:
        return await run.answer(body)
    except (Blocked, PluginUnavailable) as exc:
        raise plugin_error(exc) from None


def stream(
    run: PluginRun | None, sink: ClientStream, cut_frames: CutFrames | None = None
) -> ClientStream | GuardedStream:
    """The client's stream behind the output checks (and recorded for `finished`)."""
    if run is None:
        return sink
    return run.stream(sink, cut_frames or chat_cut, record_limit=1_048_576)


def chat_cut(message: str, code: str, type: str) -> list[bytes]:
    """How a chat stream ends when a plugin cuts it: an error frame, then `[DONE]`."""
    return [error_frame(message, code=code, type=type), DONE]


async def serve_stored(plugins: Plugins, call: Call, stored: Stored, model: ResolvedModel) -> None:
    """Answer from the cache: the JSON body, or the SSE frames replayed as the client first
    got them; billed at the model's `cache_hit_usd_per_mtok` (0 by default)."""
    usage = Usage(
        prompt_tokens=stored.prompt_tokens,
        completion_tokens=stored.completion_tokens,
        total_tokens=stored.prompt_tokens + stored.completion_tokens,
    )
    price = model.price
    hit = price.cache_hit_usd_per_mtok if price is not None else None
    call.charge_cached(usage, hit or Decimal(0))
    cache = plugins.cache
    if cache is not None and price is not None and price.input_usd_per_mtok is not None:
        cache.stats.saved_usd += float(provider_cost(price, usage))
    if stored.kind == "json":
        await call.answer_json(stored.body)
        return
    sink = ClientStream(call.request)
    if await sink.open():
        await sink.write(stored.body)
    await sink.finish()


def outcome(call: Call, kind: Literal["json", "sse"], body: bytes) -> Outcome:
    """What the client got, for the plugins' `finished` (stores in the cache, mirrors)."""
    ctx = call.ctx
    return Outcome(
        kind,
        body,
        ctx.prompt_tokens or 0,
        ctx.completion_tokens or 0,
        time.perf_counter() - ctx.started,
        ctx.cost_usd or 0.0,
    )
