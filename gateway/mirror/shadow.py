"""One shadow call (docs/mirroring.md): the callable the mirror actor (actors/mirror.py) is
given, so that the actor knows nothing of models, providers or HTTP.

The shadow model is resolved in the registry; a model of several deployments is asked on its
first deployment (no balancing, no retry, no fallback: the figures are of one deployment).
The client's body is sent as it was, with `model` rewritten to the upstream name and always
as JSON (`"stream": false`, `stream_options` dropped: a streamed primary is compared by its
figures only), with the gateway's provider key. Chat goes to chat completions or, for an
Anthropic provider, to Messages (translated both ways, as chat does); embeddings to
embeddings (not to an Anthropic provider: skipped); a Responses request is mirrored as the
chat request it translates to when it stands alone (no `previous_response_id`, no built-in
tool), else skipped.

Cost is the shadow deployment's provider cost (its prices, no fee). A job with `billed` (and
billing on, and a priced shadow) holds the shadow's maximum cost before the call (refused:
outcome `insufficient_credits`, no call) and settles the actual charge after, as a usage row
of the organization described as a mirror (its key's budgets are not charged: the key asked
for the primary only).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import trio

from actors.accountant import Accountant, BudgetExceeded, InsufficientCredits, Reservation
from actors.errors import InboxFull
from actors.upstream import Upstreams
from gateway.config import ModelConfig
from gateway.inference.billing import DEFAULT_OUTPUT_RESERVE_TOKENS, pricing_for, provider_cost
from gateway.inference.chat_upstream import chat_answer
from gateway.inference.model_registry import ModelRegistry, ResolvedModel
from protocol import anthropic
from protocol.decoding import decode_json
from protocol.errors import (
    APIError,
    UpstreamError,
    UpstreamMalformed,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from protocol.ids import ordered_id
from protocol.openai_chat import parse_chat_request, rewrite_model_in_object, rewrite_request
from protocol.pricing import estimate_tokens
from protocol.responses.request import parse_responses_request
from protocol.responses.to_chat import chat_request
from protocol.timefmt import now_us
from protocol.usage import Usage
from services.mirror import OK, SKIPPED, MirrorJob, ShadowResult
from storage.ledger import UsageCharge


class _Skip(Exception):
    """This job is not mirrored (not an error of the shadow)."""


@dataclass(frozen=True, slots=True)
class _Upstream:
    path: str
    body: bytes
    output_tokens: int  # the most the answer may hold, for a billed job's hold


def _as_json(body: bytes) -> bytes:
    """A chat body asked as JSON: `stream` false, `stream_options` dropped."""
    fields = decode_json(body, dict[str, msgspec.Raw])
    fields["stream"] = msgspec.Raw(b"false")
    fields.pop("stream_options", None)
    return msgspec.json.encode(fields)


def _chat(body: bytes, deployment: ResolvedModel) -> _Upstream:
    json_body = _as_json(body)
    parsed = parse_chat_request(json_body)
    limit = parsed.request.output_limit or DEFAULT_OUTPUT_RESERVE_TOKENS
    if deployment.provider.kind == "anthropic":
        upstream = anthropic.to_messages_request(
            json_body, upstream_model=deployment.upstream, stream=False
        )
        return _Upstream("messages", upstream, limit)
    upstream = parsed.rewrite(model=deployment.upstream, force_include_usage=False)
    return _Upstream("chat/completions", upstream, limit)


def _responses(body: bytes, deployment: ResolvedModel) -> _Upstream:
    request = parse_responses_request(body)
    if request.previous_response_id is not None or request.builtin_tools:
        raise _Skip  # needs the stored chain, or a provider that runs the tool
    chat = chat_request(request, request.input, model=deployment.upstream)
    chat.pop("stream", None)
    chat.pop("stream_options", None)
    return _chat(msgspec.json.encode(chat), deployment)


def _embeddings(body: bytes, deployment: ResolvedModel) -> _Upstream:
    if deployment.provider.kind == "anthropic":
        raise _Skip
    upstream = rewrite_request(body, model=deployment.upstream, force_include_usage=False)
    return _Upstream("embeddings", upstream, 0)


_BUILD = {"chat": _chat, "responses": _responses, "embeddings": _embeddings}


def _outcome(exc: UpstreamError) -> str:
    if isinstance(exc, UpstreamStatusError):
        return f"http_{exc.status}"
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    if isinstance(exc, UpstreamUnavailable):
        return "unavailable"
    if isinstance(exc, UpstreamMalformed):
        return "malformed"
    return "upstream_error"


def _priced(price: ModelConfig | None) -> ModelConfig | None:
    return price if price is not None and price.input_usd_per_mtok is not None else None


class ShadowCaller:
    """`await caller(job)`: one shadow call, its figures, its answer or error, its charge."""

    def __init__(
        self, registry: ModelRegistry, upstreams: Upstreams, accountant: Accountant | None
    ) -> None:
        self._registry = registry
        self._upstreams = upstreams
        self._accountant = accountant  # None: billing is off (nothing is charged)

    async def __call__(self, job: MirrorJob) -> ShadowResult:
        try:
            model = self._registry.resolve(job.shadow)
        except APIError:
            return ShadowResult("unknown_model")
        deployment = model.route.deployments[0] if model.route is not None else model
        try:
            upstream = _BUILD[job.route](job.body, deployment)
        except _Skip:
            return ShadowResult(SKIPPED)
        except APIError:  # a body the shadow's wire format cannot express
            return ShadowResult("untranslatable")
        price = _priced(deployment.price)
        reservation: Reservation | None = None
        if job.billed and self._accountant is not None and price is not None:
            try:
                reservation = await self._hold(job, price, upstream)
            except InsufficientCredits:
                return ShadowResult("insufficient_credits")
            except BudgetExceeded:
                return ShadowResult("budget_exceeded")
            except InboxFull:
                return ShadowResult("billing_busy")
        result = await self._send(job, deployment, price, upstream, reservation)
        return result

    async def _send(
        self,
        job: MirrorJob,
        deployment: ResolvedModel,
        price: ModelConfig | None,
        upstream: _Upstream,
        reservation: Reservation | None,
    ) -> ShadowResult:
        client = self._upstreams.get(deployment.provider.name)
        began = trio.current_time()
        usage: Usage | None = None
        try:
            content, _ = await client.post_json(upstream.path, upstream.body)
            if job.route == "embeddings":
                try:
                    answer, reported = rewrite_model_in_object(content, deployment.id)
                except UpstreamMalformed as exc:
                    raise exc.named(deployment.provider.name) from None
                usage = reported or Usage()
            else:
                answer, usage = chat_answer(content, deployment)
        except UpstreamError as exc:
            latency_ms = (trio.current_time() - began) * 1000
            return ShadowResult(_outcome(exc), latency_ms=latency_ms)
        finally:
            if reservation is not None:  # settled once, whatever happened (cancelled too)
                self._settle(job, price, reservation, usage, deployment.provider.name)
        latency_ms = (trio.current_time() - began) * 1000
        return ShadowResult(
            OK,
            latency_ms=latency_ms,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cost_usd=0.0 if price is None else float(provider_cost(price, usage)),
            answer=answer,
        )

    async def _hold(self, job: MirrorJob, price: ModelConfig, upstream: _Upstream) -> Reservation:
        accountant = self._accountant
        assert accountant is not None
        plan = accountant.fresh_plan(job.org_id) or await accountant.plan_of(job.org_id)
        most = pricing_for(price, plan).most(estimate_tokens(len(job.body)), upstream.output_tokens)
        held = accountant.reserve_now(job.org_id, most)
        return held if held is not None else await accountant.reserve(job.org_id, most)

    def _settle(
        self,
        job: MirrorJob,
        price: ModelConfig | None,
        reservation: Reservation,
        usage: Usage | None,
        provider: str,
    ) -> None:
        """Release the hold and charge the call (nothing when it failed: `usage` None)."""
        accountant = self._accountant
        assert accountant is not None
        if usage is None or price is None:
            accountant.settle(reservation, None)
            return
        now = now_us()
        micros = pricing_for(price, reservation.plan).charge(
            usage.prompt_tokens, usage.completion_tokens
        )
        charge = UsageCharge(
            ordered_id("txn", now),
            job.org_id,
            None,  # the organization's, not the key's (its budgets are not charged)
            job.shadow,
            job.request_id,
            micros,
            mirror_description(job),
            now,
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            provider=provider,
        )
        accountant.settle(reservation, charge)


def mirror_description(job: MirrorJob) -> str:
    """A billed shadow call's usage row, e.g. `Mirror of small (chat): haiku`."""
    return f"Mirror of {job.model} ({job.route}): {job.shadow}"
