"""Billing on the inference routes: reserve a request's maximum cost before the upstream call
(402 when the balance cannot cover it), then charge what it actually cost, or nothing when it
failed. The charge is the provider cost × (1 + the plan's platform fee) (protocol/billing.py).
Requests sent with the org's own provider key (bring-your-own-key) hold nothing and are charged
0, with a usage row all the same (`open_free_bill`)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from functools import lru_cache

from actors.accountant import Accountant, BudgetExceeded, InsufficientCredits, Reservation
from gateway.config import ModelConfig
from gateway.web.context import RequestContext
from protocol.billing import (
    FREE_TARIFF,
    KeyBudget,
    charge_micros,
    fee_percent,
    period_name,
    reserve_micros,
    tariff,
)
from protocol.budget_refusal import budget_exceeded_message
from protocol.errors import payment_required
from protocol.ids import ordered_id
from protocol.money import format_usd
from protocol.pricing import estimate_tokens, token_cost_usd
from protocol.timefmt import now_us, to_iso
from protocol.usage import Usage
from storage.ledger import UsageCharge

# Held for the answer when the client sets no `max_tokens`; the settle releases the rest.
DEFAULT_OUTPUT_RESERVE_TOKENS = 4096


def provider_cost(price: ModelConfig, usage: Usage) -> Decimal:
    assert price.input_usd_per_mtok is not None
    return token_cost_usd(
        usage.prompt_tokens,
        usage.completion_tokens,
        price.input_usd_per_mtok,
        price.output_usd_per_mtok,
    )


class Pricing:
    """How one model is priced on one plan: an integer tariff when the prices allow (the usual
    case, no Decimal on the hot path), else the exact Decimal computation. No prices: the
    org's own provider key (no cost, no fee)."""

    def __init__(self, prices: tuple[Decimal, Decimal | None] | None, fee: Decimal) -> None:
        self._prices = prices
        self._fee = fee
        self._tariff = FREE_TARIFF if prices is None else tariff(prices[0], prices[1], fee)

    def _cost(self, prompt_tokens: int, completion_tokens: int) -> Decimal:
        assert self._prices is not None
        return token_cost_usd(prompt_tokens, completion_tokens, *self._prices)

    def charge(self, prompt_tokens: int, completion_tokens: int) -> int:
        if self._tariff is not None:
            return self._tariff.charge_micros(prompt_tokens, completion_tokens)
        return charge_micros(self._cost(prompt_tokens, completion_tokens), self._fee)

    def most(self, prompt_tokens: int, completion_tokens: int) -> int:
        if self._tariff is not None:
            return self._tariff.reserve_micros(prompt_tokens, completion_tokens)
        return reserve_micros(self._cost(prompt_tokens, completion_tokens), self._fee)


def pricing_for(price: ModelConfig, plan: str) -> Pricing:
    assert price.input_usd_per_mtok is not None
    return _pricing(price.input_usd_per_mtok, price.output_usd_per_mtok, plan)


@lru_cache(maxsize=4096)
def _pricing(input_usd: Decimal, output_usd: Decimal | None, plan: str) -> Pricing:
    """Cached by prices, not by config object: a `provider/model` name that is not configured
    gets a new config per request (gateway/inference/model_registry.py)."""
    return Pricing((input_usd, output_usd), fee_percent(plan))


class UnitPricing:
    """A price per unit other than tokens (1,000 characters, a minute, an image, a search
    unit), on one plan: exact Decimal, rounded once per request (charge half up, hold up)."""

    __slots__ = ("_fee", "_price")

    def __init__(self, unit_price: Decimal, fee: Decimal) -> None:
        self._price = unit_price
        self._fee = fee

    def charge(self, units: Decimal) -> int:
        return charge_micros(units * self._price, self._fee)

    def most(self, units: Decimal) -> int:
        return reserve_micros(units * self._price, self._fee)


class Bill:
    """One request's reservation, settled once (`charge` for tokens, `charge_units` for the
    other units) or released (`close`)."""

    def __init__(
        self,
        accountant: Accountant,
        reservation: Reservation,
        pricing: Pricing | UnitPricing,
        description: str,
        budget: KeyBudget | None = None,
        plan: str | None = None,
    ) -> None:
        self._accountant = accountant
        self._reservation = reservation
        self._pricing = pricing
        self._description = description
        self._budget = budget
        self._plan = plan  # token pricing's plan, for `reprice`

    def reprice(self, price: ModelConfig) -> None:
        """Charge tokens at `price` (the deployment that answers, of a model of several:
        gateway/inference/routing.py); the hold, at the highest of them, covers it."""
        if self._plan is not None:
            self._pricing = pricing_for(price, self._plan)

    def charge(self, ctx: RequestContext, usage: Usage, key_id: str | None) -> int:
        assert isinstance(self._pricing, Pricing)
        micros = self._pricing.charge(usage.prompt_tokens, usage.completion_tokens)
        return self._settle(ctx, micros, key_id, usage)

    def charge_legs(
        self,
        ctx: RequestContext,
        legs: Sequence[tuple[Usage, ModelConfig | None]],
        key_id: str | None,
    ) -> int:
        """As `charge`, for a stream that went on at other deployments after breaking (stream
        failover): each leg at its own deployment's price, settled as one charge. A bill
        without a plan (the org's own key: free) charges the legs as one usage at its pricing."""
        assert isinstance(self._pricing, Pricing)
        plan = self._plan
        if plan is None or any(price is None for _, price in legs):
            whole = Usage(
                prompt_tokens=sum(u.prompt_tokens for u, _ in legs),
                completion_tokens=sum(u.completion_tokens for u, _ in legs),
            )
            return self._settle(
                ctx,
                self._pricing.charge(whole.prompt_tokens, whole.completion_tokens),
                key_id,
                whole,
            )
        micros = sum(
            pricing_for(price, plan).charge(u.prompt_tokens, u.completion_tokens)
            for u, price in legs
            if price is not None
        )
        whole = Usage(
            prompt_tokens=sum(u.prompt_tokens for u, _ in legs),
            completion_tokens=sum(u.completion_tokens for u, _ in legs),
        )
        return self._settle(ctx, micros, key_id, whole)

    def charge_cached(
        self, ctx: RequestContext, usage: Usage, usd_per_mtok: Decimal, key_id: str | None
    ) -> int:
        """As `charge`, for an answer from the response cache: every token at `usd_per_mtok`
        (the model's `cache_hit_usd_per_mtok`), the usage row saying so (docs/cache.md)."""
        self._description += " (cache hit)"
        if self._plan is None:  # the org's own key: free
            assert isinstance(self._pricing, Pricing)
            micros = self._pricing.charge(usage.prompt_tokens, usage.completion_tokens)
        else:
            pricing = _pricing(usd_per_mtok, usd_per_mtok, self._plan)
            micros = pricing.charge(usage.prompt_tokens, usage.completion_tokens)
        return self._settle(ctx, micros, key_id, usage)

    def charge_units(self, ctx: RequestContext, units: Decimal, key_id: str | None) -> int:
        assert isinstance(self._pricing, UnitPricing)
        return self._settle(ctx, self._pricing.charge(units), key_id)

    def _settle(
        self, ctx: RequestContext, micros: int, key_id: str | None, usage: Usage | None = None
    ) -> int:
        """Queue the charge, with its tokens (none for other units) and the provider that
        answered (for usage analytics, storage/usage.py)."""
        now = now_us()
        # The transaction id is fixed now, so that a retried flush recognises the row.
        charge = UsageCharge(
            ordered_id("txn", now),
            self._reservation.org_id,
            key_id,
            ctx.model or "",
            ctx.request_id,
            micros,
            self._description,
            now,
            self._budget,
            input_tokens=0 if usage is None else usage.prompt_tokens,
            output_tokens=0 if usage is None else usage.completion_tokens,
            provider=provider_of(ctx.deployment),
        )
        # Written when the request ends, with its completion event (gateway/inference/
        # completion_events.py): the request middleware's finish step releases it.
        trace = ctx.trace
        if trace is None:
            self._accountant.settle(self._reservation, charge, awaits_event=True)
        else:  # the charge handed to the accountant (its write is batched, after the request)
            with trace.step("settle", **{"gateway.cost_micros": micros}):
                self._accountant.settle(self._reservation, charge, awaits_event=True)
        return micros

    def close(self) -> None:
        """Release the reservation if nothing was charged (the request failed)."""
        self._accountant.settle(self._reservation, None)


def provider_of(deployment: str | None) -> str | None:
    """The provider of a `<provider>/<upstream>` deployment name (RequestContext); None when
    no deployment answered (a cached answer)."""
    return None if not deployment else deployment.partition("/")[0]


async def open_bill(
    accountant: Accountant,
    org_id: str,
    price: ModelConfig,
    *,
    prompt_bytes: int,
    output_tokens: int,
    description: str,
    budget: KeyBudget | None = None,
) -> Bill:
    """Reserve the most the request can cost; APIError 402 `budget_exceeded` when a cap of
    the key cannot hold it (and `budget.exhausted` is written once per period), 402
    `insufficient_credits` when the balance cannot. Without I/O in the usual case."""
    plan = accountant.fresh_plan(org_id) or await accountant.plan_of(org_id)
    pricing = pricing_for(price, plan)
    most = pricing.most(estimate_tokens(prompt_bytes), output_tokens)
    reservation = await _hold(accountant, org_id, most, budget)
    return Bill(accountant, reservation, pricing, description, budget, plan)


async def open_unit_bill(
    accountant: Accountant,
    org_id: str,
    unit_price: Decimal,
    *,
    units: Decimal,
    description: str,
    budget: KeyBudget | None = None,
) -> Bill:
    """As `open_bill`, for a request priced per unit: holds `units` (the most the request can
    use: its characters, images, documents or the audio's longest duration) × `unit_price`."""
    plan = accountant.fresh_plan(org_id) or await accountant.plan_of(org_id)
    pricing = UnitPricing(unit_price, fee_percent(plan))
    reservation = await _hold(accountant, org_id, pricing.most(units), budget)
    return Bill(accountant, reservation, pricing, description, budget)


async def _hold(
    accountant: Accountant, org_id: str, most: int, budget: KeyBudget | None
) -> Reservation:
    try:
        reservation = accountant.reserve_now(org_id, most, budget)
        if reservation is None:
            reservation = await accountant.reserve(org_id, most, budget)
    except BudgetExceeded as exc:
        await accountant.note_exhausted(org_id, exc)
        raise payment_required(
            budget_exceeded_message(
                period=period_name(exc.period.label),
                cap=exc.cap,
                committed=exc.committed,
                held=exc.held,
                estimate=most,
                subject="this request",
                resets_at=to_iso(exc.period.end_us) or "",
            ),
            code="budget_exceeded",
        ) from None
    except InsufficientCredits as exc:
        available = format_usd(max(exc.available_micros, 0))
        raise payment_required(
            f"The organization's credit balance ({available} available) cannot cover this"
            f" request (up to {format_usd(exc.needed_micros)}); top up with"
            " POST /v1/credits/topup.",
            code="insufficient_credits",
        ) from None
    return reservation


async def open_free_bill(
    accountant: Accountant, org_id: str, description: str, *, per_unit: bool = False
) -> Bill:
    """A bill for a request sent with the org's own provider key (bring-your-own-key): the
    provider bills the org, so nothing is held against the balance — never a 402, whatever the
    balance, even below zero — and the charge is 0 (no fee), written as a usage row for the
    record. The zero reservation is the accountant's own type, settled as any other."""
    plan = await accountant.plan_of(org_id)
    pricing = UnitPricing(Decimal(0), Decimal(0)) if per_unit else Pricing(None, Decimal(0))
    return Bill(accountant, Reservation(org_id, plan, 0), pricing, description)
