"""A request's attempts on the deployments of its model (docs/routing.md).

`attempts(call, deps, model, attempt)` runs `attempt(deployment)` on the deployment the
model's balancer chooses (services/routing/balancer.py) and, when it fails for a reason another
deployment may not have, on the next, until one answers, `max_attempts` were made, or
`retry_budget_s` has passed (no attempt starts after it). Retried: connect failures, timeouts,
broken connections, malformed answers, and the statuses of `retry_on_status` (429 and 5xx by
default); never a 4xx about the client's own request, which another deployment would refuse
too. Each failure counts against the deployment's breaker (services/routing/breaker.py); a 429
or a `Retry-After` rests it at once. Between attempts a short jittered pause (`backoff_s`).

A request whose answer has begun (a stream's first byte) is not retried here. A request with
`metadata.idempotency_key` (`replayable=False`) is retried only when the first attempt cannot
have reached the provider's model (the connection failed, or 429): it is never sent twice.

With the org's own key for the model's first provider (bring-your-own-key), only deployments of
providers it has its own key for are tried; without, only those it has none for — so a request
is billed, or not, the way its reservation was made. The answer names its deployment and the
attempts made (`x-gateway-deployment`, `x-gateway-attempts`; the access log too). A model of
one deployment has no route: one attempt, nothing chosen, nothing counted.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache, partial
from typing import TYPE_CHECKING, TypeVar

import trio

from actors.errors import ConnectFailed
from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.inference.model_registry import ResolvedModel, Route, single_route
from gateway.provider_keys.gateway_key import missing_variable
from protocol.errors import (
    APIError,
    UpstreamError,
    UpstreamMalformed,
    UpstreamStatusError,
    UpstreamTimeout,
)
from protocol.provider_keys import INVALID_PROVIDER_KEY
from services.routing.balancer import Target

if TYPE_CHECKING:  # the OpenTelemetry SDK: imported only when tracing is on
    from gateway.telemetry.tracing import RequestTrace

T = TypeVar("T")
log = logging.getLogger("gateway.routing")
BACKOFF_BASE_S = 0.05
BACKOFF_MAX_S = 1.0
_DEPLOYMENT = b"x-gateway-deployment"
_ATTEMPTS = b"x-gateway-attempts"
_ONE_ATTEMPT = (_ATTEMPTS, b"1")


async def attempts(
    call: Call,
    deps: InferenceDeps,
    model: ResolvedModel,
    attempt: Callable[[ResolvedModel], Awaitable[T]],
    *,
    fallbacks: Sequence[ResolvedModel] = (),
    replayable: bool = True,
) -> T:
    """`attempt(deployment)`'s result from the first deployment that answers, of `model`, then
    of its fallbacks (`fallbacks`: the models to try, in order, once every deployment of the
    ones before failed; admission checked them)."""
    if model.route is None and not fallbacks:
        _answered_by(call, model, 1)
        return await _timed(call, deps, model, attempt)
    return await _Attempts(call, deps, [model, *fallbacks], replayable).run(attempt)


class _GaveUp(Exception):
    """Every deployment of one model failed (or rests): the next model's turn."""


class _Attempts:
    def __init__(
        self, call: Call, deps: InferenceDeps, chain: list[ResolvedModel], replayable: bool
    ) -> None:
        first = _route_of(chain[0])
        self.call = call
        self.deps = deps
        self.chain = chain
        self.replayable = replayable
        self.max_attempts = first.max_attempts  # the first model's policy: fallbacks included
        self.budget_s = first.retry_budget_s
        self.byok = call.own_key is not None
        self.key_provider = chain[0].provider.name  # whose own key `call.own_key` is
        self.made = 0
        self.last: UpstreamError | None = None
        self.route = self.last_route = first
        self.tried: set[int] = set()
        self.refused: set[int] = set()  # deployments this request may not use (keys)
        self.current: Target  # the deployment the attempt is on now (set per attempt)
        self.broke = False  # its stream broke and was not continued

    async def run(self, attempt: Callable[[ResolvedModel], Awaitable[T]]) -> T:
        deadline = trio.current_time() + self.budget_s
        routes = [_route_of(model) for model in self.chain]
        self.last_route = routes[-1]
        for route in routes:
            if self.made >= self.max_attempts or (self.made and trio.current_time() >= deadline):
                break
            self.route = route
            self.tried.clear()
            self.refused.clear()
            try:
                return await self._model(attempt, deadline)
            except _GaveUp:
                continue
        if self.last is not None:
            raise self.last
        raise _no_deployment(self.chain[0])

    async def _model(self, attempt: Callable[[ResolvedModel], Awaitable[T]], deadline: float) -> T:
        """Attempts on the current model's deployments; _GaveUp when they are spent."""
        route = self.route
        while self.made < self.max_attempts:
            target = await self._next(deadline)
            if target is None:
                break
            deployment = route.deployments[target.index]
            if not await self._may_use(deployment):
                self.refused.add(target.index)
                continue
            self.made += 1
            self.tried.add(target.index)
            _answered_by(self.call, deployment, self.made)
            began = trio.current_time()
            target.started(began)
            self.current, self.broke = target, False
            self.call.failover = partial(self._fail_over, deadline)
            try:
                result = await _timed(self.call, self.deps, deployment, attempt)
            except UpstreamError as exc:  # before the answer began: the first deployment's
                target.in_flight -= 1
                if await self._own_key_refused(target, deployment, exc):
                    self.last = exc
                    continue  # the org's key there is now marked invalid: another deployment
                if not self._count_failure(target, exc):
                    raise
                if not self._may_retry(exc):
                    raise
                self.last = exc
                if self.made < self.max_attempts:
                    await self._pause(deadline)
                continue
            except BaseException:
                self.current.in_flight -= 1
                self.current.breaker.release()  # no verdict on the deployment
                raise
            last = self.current  # the last a broken stream went on with
            last.in_flight -= 1
            ctx = self.call.ctx
            last.used_tokens((ctx.prompt_tokens or 0) + (ctx.completion_tokens or 0))  # its tpm
            if not self.broke:  # (a stream that ended broken was counted as it broke)
                last.breaker.success()
                if last is target:  # its first byte, not a continuation's
                    last.answered((self.call.first_byte_at or trio.current_time()) - began)
            return result
        raise _GaveUp

    async def _fail_over(self, deadline: float, exc: UpstreamError) -> ResolvedModel | None:
        """A stream broke after its first byte (`exc`) on the current deployment: counted
        against it; the deployment of the same model to continue on (usable, not tried yet,
        speaking the OpenAI wire format, within `max_attempts` and the budget), or None when
        there is none or the model does not allow it (`stream_failover`)."""
        broken = self.current
        self._tripped(broken, broken.breaker.failure(trio.current_time()))
        self.broke, self.last = True, exc
        route = self.route
        while route.stream_failover and self.made < self.max_attempts:
            now = trio.current_time()
            if now >= deadline:
                return None
            order = [
                t
                for t in route.balancer.order(now)
                if t.index not in self.tried and t.index not in self.refused
            ]
            if not order:
                return None
            target = order[0]
            deployment = route.deployments[target.index]
            if deployment.provider.kind == "anthropic" or not await self._may_use(deployment):
                self.refused.add(target.index)
                continue
            self.made += 1
            self.tried.add(target.index)
            broken.in_flight -= 1
            target.started(now)
            self.current, self.broke = target, False
            ctx = self.call.ctx  # the answer's headers left already: the access log says it
            ctx.deployment, ctx.attempts = deployment.deployment, self.made
            return deployment
        return None

    async def _next(self, deadline: float) -> Target | None:
        """The deployment to try next: one not tried yet if any is usable; when none is usable
        (all resting), wait for the first to rest out if that comes within the budget."""
        while True:
            now = trio.current_time()
            if self.made and now >= deadline:
                return None
            order = [t for t in self.route.balancer.order(now) if t.index not in self.refused]
            if order:
                # Each deployment once per model; tried ones again only on the last model
                # (no fallback left to try instead).
                fresh = [t for t in order if t.index not in self.tried]
                if fresh:
                    return fresh[0]
                if self.route is not self.last_route:
                    return None
                return order[0]
            if self.route is not self.last_route:
                return None  # a fallback is better than waiting for a rest to end
            resting = [
                t.breaker.open_until
                for t in self.route.balancer.targets
                if t.index not in self.refused and t.healthy and t.breaker.state == "open"
            ]
            wake = min(resting, default=None)
            if wake is None or wake > deadline:
                return None
            await trio.sleep_until(wake)

    async def _may_use(self, deployment: ResolvedModel) -> bool:
        """Whether this request may go to `deployment` with the key it would use there (its
        own for its own-key requests, the gateway's otherwise); sets `call.own_key` for it."""
        call = self.call
        provider = deployment.provider
        if provider.name != self.key_provider:
            self.key_provider = provider.name
            try:
                await call.find_own_key(self.deps.provider_keys, provider.name)
            except APIError as exc:
                if exc.code != INVALID_PROVIDER_KEY:
                    raise
                self.key_provider = ""  # the org's key there was refused: not this way
                return False
        if (call.own_key is not None) != self.byok:
            if not self.byok:  # the lookup noted a key this request will not use
                call.own_key = None
                call.ctx.own_key = None
                self.key_provider = ""
            return False
        return self.byok or missing_variable(provider) is None

    async def _own_key_refused(
        self, target: Target, deployment: ResolvedModel, exc: UpstreamError
    ) -> bool:
        """The provider refused the org's own key (401/403): record it as the boundary would
        (the key is marked invalid: services/provider_keys.py) and leave the deployment out of
        this request; True then. The deployment itself is fine (no breaker verdict)."""
        own = self.call.ctx.own_key
        if not (
            isinstance(exc, UpstreamStatusError)
            and exc.status in (401, 403)
            and own is not None
            and exc.provider == deployment.provider.name == own.provider
        ):
            return False
        target.breaker.release()
        self.refused.add(target.index)
        self.key_provider = ""  # look the key up again: it is invalid now
        try:
            await own.reporter.report_invalid(
                own.org_id, own.provider, status=exc.status, started=self.call.ctx.started
            )
        except Exception:
            log.exception("recording that %r rejected an organization's key failed", own.provider)
        return True

    def _count_failure(self, target: Target, exc: UpstreamError) -> bool:
        """Record `exc` against the deployment; False when it is the client's own error (the
        deployment answered: that counts as a success)."""
        if isinstance(exc, UpstreamStatusError):
            status = exc.status
            if status < 500 and status not in self.route.retry_on_status:
                target.breaker.success()
                return False
            rest_s = _seconds(exc.retry_after)
            now = trio.current_time()
            self._tripped(
                target, target.breaker.failure(now, rate_limited=status == 429, rest_s=rest_s)
            )
            return True
        self._tripped(target, target.breaker.failure(trio.current_time()))
        return True

    def _tripped(self, target: Target, tripped: bool) -> None:
        cooldowns = self.deps.cooldowns
        if tripped and cooldowns is not None:
            cooldowns.tripped(target)  # other instances rest it too

    def _may_retry(self, exc: UpstreamError) -> bool:
        if self.call.request.started:  # a stream began: stream failover's job, not a retry
            return False
        if isinstance(exc, UpstreamStatusError):
            if exc.status not in self.route.retry_on_status:
                return False
            return self.replayable or exc.status == 429
        return self.replayable or isinstance(exc, ConnectFailed)

    async def _pause(self, deadline: float) -> None:
        """A short jittered pause before the next attempt (within the budget)."""
        delay = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (self.made - 1))
        delay *= random.uniform(0.5, 1.0)
        await trio.sleep(max(0.0, min(delay, deadline - trio.current_time())))


async def _timed(
    call: Call,
    deps: InferenceDeps,
    deployment: ResolvedModel,
    attempt: Callable[[ResolvedModel], Awaitable[T]],
) -> T:
    """`attempt(deployment)`, its duration on /metrics by provider and outcome: to its answer,
    or to the head of a streamed one (the stream's own length is the client's). With tracing
    on, a sampled request's attempt is the upstream call's CLIENT span (`_traced`)."""
    trace = call.ctx.trace
    if trace is not None:
        if trace.recording:
            attempt = partial(_traced, trace, call, attempt)
        else:  # unsampled: only its traceparent goes on, the same for every attempt
            call.trace_headers = trace.quiet_headers
    metrics = deps.metrics
    if metrics is None:
        return await attempt(deployment)
    began = trio.current_time()
    try:
        result = await attempt(deployment)
    except UpstreamError as exc:
        metrics.observe_attempt(
            deployment.provider.name, _outcome(exc), trio.current_time() - began
        )
        raise
    answered = call.first_byte_at or trio.current_time()
    metrics.observe_attempt(deployment.provider.name, "ok", answered - began)
    return result


async def _traced(
    trace: RequestTrace,
    call: Call,
    attempt: Callable[[ResolvedModel], Awaitable[T]],
    deployment: ResolvedModel,
) -> T:
    """`attempt(deployment)` as the upstream call's span (`chat {model}`), its `traceparent`
    sent upstream (`call.trace_headers`), its time to first byte (a stream's head; the whole
    answer for JSON) and tokens recorded."""
    provider = deployment.provider
    span = trace.upstream(
        call.ctx.route, provider.name, provider.kind, provider.base_url, deployment.upstream
    )
    call.trace_headers = span.headers
    began = trio.current_time()
    try:
        result = await attempt(deployment)
    except BaseException as exc:
        span.end(None, None, exc)
        raise
    finally:
        call.trace_headers = b""
    first = call.first_byte_at
    span.first_byte(
        (first if first is not None and first >= began else trio.current_time()) - began
    )
    ctx = call.ctx
    span.end(ctx.prompt_tokens, ctx.completion_tokens, finish_reasons=trace.finish_reasons)
    return result


def _outcome(exc: UpstreamError) -> str:
    """How a failed attempt ended, as metric_labels.OUTCOMES names it."""
    if isinstance(exc, UpstreamStatusError):
        if exc.status == 429:
            return "http_429"
        return "http_4xx" if exc.status < 500 else "http_5xx"
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    if isinstance(exc, UpstreamMalformed):
        return "malformed"
    return "unavailable"


def _answered_by(call: Call, deployment: ResolvedModel, made: int) -> None:
    """Name the deployment and the attempts on the answer and in the access log."""
    headers = call.request.headers
    if made > 1:
        headers[:] = [h for h in headers if h[0] not in (_DEPLOYMENT, _ATTEMPTS)]
    name, header = _named(deployment.provider.name, deployment.upstream)
    headers.append(header)
    headers.append(_ONE_ATTEMPT if made == 1 else (_ATTEMPTS, str(made).encode()))
    ctx = call.ctx
    ctx.model = deployment.id  # a fallback's, when one answers
    ctx.deployment = name
    ctx.attempts = made


@lru_cache(maxsize=4096)
def _named(provider: str, upstream: str) -> tuple[str, tuple[bytes, bytes]]:
    """A deployment's name and its `x-gateway-deployment` header, made once (the hot path)."""
    name = f"{provider}/{upstream}"
    return name, (_DEPLOYMENT, name.encode())


def _route_of(model: ResolvedModel) -> Route:
    return model.route if model.route is not None else single_route(model)


def _seconds(retry_after: str | None) -> float:
    """A Retry-After in seconds (an HTTP date, or nothing usable: 0)."""
    if retry_after is None:
        return 0.0
    try:
        return max(0.0, min(float(retry_after), 3600.0))
    except ValueError:
        return 0.0


def _no_deployment(model: ResolvedModel) -> APIError:
    return APIError(
        503,
        f"No deployment of the model {model.id!r} can take the request now (each is resting"
        " after failures, over its own limits, or unhealthy); try again shortly.",
        type="server_error",
        code="no_deployment_available",
        headers={"Retry-After": "1"},
    )
