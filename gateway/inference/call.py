"""One hot-path request: its ASGI channels, caller, rate-limit headers and response state,
and the steps every inference route shares (authenticate, admit, answer)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from actors.ratelimit import RateLimiter, RateLimiterUnavailable
from actors.throttled_log import ThrottledWarning
from gateway.asgi import Headers, header, send_json
from gateway.auth import Authenticator
from gateway.config import ModelConfig
from gateway.inference.billing import Bill, provider_cost
from gateway.middleware import Receive, Scope, Send
from gateway.model_registry import ResolvedModel
from gateway.principal import Principal
from gateway.request_context import RequestContext
from protocol.errors import APIError, forbidden
from protocol.ratelimit_headers import decision_headers
from protocol.usage import Usage

log = logging.getLogger("gateway.ratelimit")
limiter_unavailable = ThrottledWarning(
    log, "rate limiter unavailable, admitting without a limit: %s"
)


@dataclass
class Call:
    scope: Scope
    receive: Receive
    send: Send
    ctx: RequestContext
    principal: Principal | None = None
    headers: Headers = field(default_factory=list)  # added to every response (rate limits)
    started: bool = False  # the response has begun: errors can no longer be a JSON answer
    bill: Bill | None = None  # with billing on: the request's reservation
    # The org's own key for the model's provider (bring-your-own-key): sent upstream instead of
    # the gateway's; the provider bills the org, so the request costs nothing here.
    own_key: str | None = None

    async def authenticate(self, auth: Authenticator, scope_name: str) -> Principal:
        principal = await auth.authenticate(header(self.scope, b"authorization"))
        self.ctx.org_id = principal.org_id
        self.ctx.key_id = principal.key_id
        principal.require_scope(scope_name)
        self.principal = principal
        return principal

    def check_model_allowed(self, model: ResolvedModel) -> None:
        key = self.principal.key if self.principal else None
        if key is None or key.allowed_models is None:
            return
        if not set(model.names()) & set(key.allowed_models):
            raise forbidden(
                f"This key may not use the model {model.id!r}.", code="model_not_allowed"
            )

    async def admit(self, limiter: RateLimiter) -> None:
        """Apply the key's `rate_limit_rpm`; APIError 429 with Retry-After when over it."""
        key = self.principal.key if self.principal else None
        if key is None or key.rate_limit_rpm is None:
            return
        try:
            decision = await limiter.admit(key.id, key.rate_limit_rpm)
        except RateLimiterUnavailable as exc:
            # Fail open: an outage of the shared limiter store must not stop all traffic.
            # Budgets (money) do not depend on this path. See docs/decisions.md.
            limiter_unavailable(exc)
            return
        self.headers = [(k.encode(), v.encode()) for k, v in decision_headers(decision)]
        if not decision.allowed:
            raise APIError(
                429,
                f"Rate limit of {key.rate_limit_rpm} requests per minute reached for this key.",
                type="rate_limit_error",
                code="rate_limit_exceeded",
            )

    def charge(self, usage: Usage, price: ModelConfig | None) -> None:
        """Record the usage for the log and bill it (once; billing off: log the cost only).
        With the org's own key the cost is 0 (`price` is None only then)."""
        self.ctx.prompt_tokens = usage.prompt_tokens
        self.ctx.completion_tokens = usage.completion_tokens
        if self.bill is not None:
            key_id = self.principal.key_id if self.principal else None
            self.ctx.cost_usd = self.bill.charge(self.ctx, usage, key_id) / 1_000_000
            self.bill = None
        elif self.own_key is not None:
            self.ctx.cost_usd = 0.0
        else:  # billing off: the provider cost, for the log
            assert price is not None
            self.ctx.cost_usd = float(provider_cost(price, usage))

    def close_bill(self) -> None:
        """Release a reservation nothing was charged against (the request failed)."""
        if self.bill is not None:
            self.bill.close()
            self.bill = None

    async def answer_json(self, body: bytes, status: int = 200) -> None:
        self.started = True
        await send_json(self.send, status, body, self.headers)
