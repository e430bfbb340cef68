"""One hot-path request: the layer's `Request` (ASGI channels, caller, response headers and
state) plus what inference adds (bill, own provider key), and the steps every inference route
shares (model allowed, charge, answer). The caller was authenticated, and admitted by its
rate limit, by the request layer before the handler ran."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Protocol

from gateway.config import ModelConfig
from gateway.inference.billing import Bill, provider_cost
from gateway.inference.model_registry import ResolvedModel, require_allowed
from gateway.web.context import InvalidKeyReporter, OwnKey
from gateway.web.request import Request
from gateway.web.responses import send_json
from protocol.errors import UpstreamError
from protocol.usage import Usage
from services.principal import Principal


class OwnKeys(InvalidKeyReporter, Protocol):
    """The org's own provider keys (services/provider_keys.py `ProviderKeyResolver`)."""

    async def lookup(self, org_id: str, provider: str) -> str | None: ...


class Call:
    __slots__ = (
        "bill",
        "ctx",
        "failover",
        "first_byte_at",
        "own_key",
        "principal",
        "request",
        "trace_headers",
    )

    def __init__(self, request: Request) -> None:
        assert request.principal is not None  # every inference route needs a credential
        self.request = request
        self.ctx = request.ctx
        self.principal: Principal = request.principal
        self.bill: Bill | None = None  # with billing on: the request's reservation
        # The org's own key for the model's provider (bring-your-own-key): sent upstream
        # instead of the gateway's; the provider bills the org, so the request costs nothing.
        self.own_key: str | None = None
        # When a streamed answer's first byte went to the client (Trio's clock), for routing's
        # time-to-first-byte average (gateway/inference/routing.py).
        self.first_byte_at: float | None = None
        # Set by routing for a model of several deployments: given what broke a stream after
        # its first byte, the deployment to continue it on, or None (stream failover).
        self.failover: Callable[[UpstreamError], Awaitable[ResolvedModel | None]] | None = None
        # With tracing on: the current upstream attempt's `traceparent` header line(s), sent
        # with its upstream request (gateway/inference/routing.py sets it per attempt).
        self.trace_headers = b""

    async def find_own_key(self, keys: OwnKeys, provider: str) -> str | None:
        """The org's own key for `provider`, if it has one (then `own_key`, and noted on the
        request so that the boundary maps the provider refusing it: gateway/web/errors.py)."""
        org_id = self.principal.org_id
        self.own_key = await keys.lookup(org_id, provider)
        if self.own_key is not None:
            self.ctx.own_key = OwnKey(org_id, provider, keys)
        return self.own_key

    def check_model_allowed(self, model: ResolvedModel) -> None:
        key = self.principal.key
        if key is not None:
            require_allowed(model, key.allowed_models)

    def price_at(self, deployment: ResolvedModel, held: ModelConfig | None) -> ModelConfig | None:
        """The price an attempt on `deployment` is charged at, given the one the request was
        held at (`held`: None with the org's own key, which pays nothing): the deployment's own
        when it differs (a model of several deployments, or a fallback; the hold was made at
        the highest of them), and the bill repriced to it."""
        if held is None or deployment.price is held:
            return held
        assert deployment.price is not None  # an unpriced deployment leaves its model unpriced
        if self.bill is not None:
            self.bill.reprice(deployment.price)
        return deployment.price

    def charge(self, usage: Usage, price: ModelConfig | None) -> None:
        """Record the usage for the log and bill it (once; billing off: log the cost only).
        With the org's own key the cost is 0 (`price` is None only then)."""
        self.ctx.prompt_tokens = usage.prompt_tokens
        self.ctx.completion_tokens = usage.completion_tokens
        if self.bill is not None:
            key_id = self.principal.key_id
            self.ctx.cost_usd = self.bill.charge(self.ctx, usage, key_id) / 1_000_000
            self.bill = None
        elif self.own_key is not None:
            self.ctx.cost_usd = 0.0
        else:  # billing off: the provider cost, for the log
            assert price is not None
            self.ctx.cost_usd = float(provider_cost(price, usage))

    def charge_legs(self, legs: list[tuple[Usage, ModelConfig | None]]) -> None:
        """As `charge`, for a stream that went on at other deployments after breaking: each
        leg's usage at its deployment's price (stream failover, docs/routing.md)."""
        self.ctx.prompt_tokens = sum(usage.prompt_tokens for usage, _ in legs)
        self.ctx.completion_tokens = sum(usage.completion_tokens for usage, _ in legs)
        if self.bill is not None:
            key_id = self.principal.key_id
            self.ctx.cost_usd = self.bill.charge_legs(self.ctx, legs, key_id) / 1_000_000
            self.bill = None
        elif self.own_key is not None:
            self.ctx.cost_usd = 0.0
        else:  # billing off: the provider cost, for the log
            self.ctx.cost_usd = float(
                sum(provider_cost(price, usage) for usage, price in legs if price is not None)
            )

    def charge_cached(self, usage: Usage, usd_per_mtok: Decimal) -> None:
        """As `charge`, for an answer from the response cache, at `usd_per_mtok` a token."""
        self.ctx.prompt_tokens = usage.prompt_tokens
        self.ctx.completion_tokens = usage.completion_tokens
        if self.bill is not None:
            key_id = self.principal.key_id
            micros = self.bill.charge_cached(self.ctx, usage, usd_per_mtok, key_id)
            self.ctx.cost_usd = micros / 1_000_000
            self.bill = None
        elif self.own_key is not None:
            self.ctx.cost_usd = 0.0
        else:  # billing off: what the cache hit costs, for the log
            tokens = usage.prompt_tokens + usage.completion_tokens
            self.ctx.cost_usd = float(usd_per_mtok * tokens / 1_000_000)

    def charge_units(self, units: Decimal, unit_price: Decimal | None) -> None:
        """As `charge`, for a request priced per unit (`unit_price` None only with the org's
        own key): `units` × `unit_price` × (1 + fee), e.g. 1.234 thousand characters."""
        if self.bill is not None:
            key_id = self.principal.key_id
            self.ctx.cost_usd = self.bill.charge_units(self.ctx, units, key_id) / 1_000_000
            self.bill = None
        elif self.own_key is not None:
            self.ctx.cost_usd = 0.0
        else:  # billing off: the provider cost, for the log
            assert unit_price is not None
            self.ctx.cost_usd = float(units * unit_price)

    def close_bill(self) -> None:
        """Release a reservation nothing was charged against (the request failed)."""
        if self.bill is not None:
            self.bill.close()
            self.bill = None

    async def answer_json(self, body: bytes, status: int = 200) -> None:
        request = self.request
        request.started = True
        await send_json(request.send, status, body, request.headers)
