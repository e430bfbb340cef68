"""The steps between a parsed request and its upstream call, shared by the inference routes:
which model, may this key use it, does its provider do this, with whose provider key, what does
it cost. (The key's rate limit was applied by the request layer: gateway/web/rate_limit.py.)"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from decimal import Decimal
from functools import lru_cache

from actors.accountant import Accountant
from gateway.config import ModelConfig
from gateway.inference.billing import Bill, open_bill, open_free_bill, open_unit_bill
from gateway.inference.call import Call
from gateway.inference.deps import InferenceDeps
from gateway.inference.fine_tuned import FT_PREFIX, keep_affinity, resolve_fine_tuned
from gateway.inference.model_registry import (
    ResolvedModel,
    capability_missing,
    model_not_found,
    require_price,
)
from gateway.provider_keys.gateway_key import require_gateway_key
from protocol.billing import KeyBudget
from protocol.errors import APIError, invalid_request

# What each provider kind can do through the gateway; `supports` in [[providers]] narrows it
# further. openai, ollama and vllm speak the OpenAI wire format (no entry: all). Cohere's own
# format serves rerank (protocol/rerank/).
_KIND_CAPABILITIES = {
    "anthropic": frozenset({"chat", "responses"}),
    "cohere": frozenset({"rerank"}),
}
_DESCRIPTIONS = {
    "chat": "chat completions",
    "embeddings": "embeddings",
    "speech": "speech",
    "transcription": "transcriptions",
    "translation": "translations",
    "images": "images",
    "rerank": "rerank",
    "responses": "responses",  # served by translating to chat (gateway/responses/)
}
# The `supports` name ([[providers]], docs/inference.md) of each capability, where it differs.
_SUPPORTS_NAME = {
    "speech": "audio",
    "transcription": "audio",
    "translation": "audio",
    "responses": "chat",
}
_BUDGET = {"gateway.admission": "budget"}  # the hold's span (gateway/telemetry/)
# The `[[models]]` price of the capabilities billed per unit rather than per token.
UNIT_PRICE_FIELDS = {
    "speech": "usd_per_1k_chars",
    "transcription": "usd_per_minute",
    "translation": "usd_per_minute",
    "images": "usd_per_image",
    "rerank": "usd_per_search_unit",
}


async def admit_model(
    call: Call,
    deps: InferenceDeps,
    name: str,
    *,
    capability: str,
    unknown_model_status: int = 404,
) -> tuple[ResolvedModel, ModelConfig | None]:
    """The resolved model and its price, once the request may go upstream; APIError otherwise
    (`unknown_model_status` (404) unknown model, 403 not allowed, 400 unsupported or unpriced,
    500 the org's provider key unreadable). With the org's own key for the
    model's provider (bring-your-own-key, set on `call.own_key`) the price is None: nothing is
    billed, so an unpriced model is allowed. An `ft:` name is the caller's organization's
    fine-tuned model (one storage read); any other name is resolved without I/O."""
    try:
        if name.startswith(FT_PREFIX):
            model = await resolve_fine_tuned(deps, call.principal.org_id, name)
        else:
            model = deps.registry.resolve(name)
    except APIError as exc:
        if exc.code == "model_not_found" and exc.status != unknown_model_status:
            raise model_not_found(name, status=unknown_model_status) from None
        raise
    call.ctx.model = model.id
    call.check_model_allowed(model)
    _check_serves(model, capability)
    if capability == "translation" and not model.translations:
        raise invalid_request(
            f"The model {model.id!r} does not translate audio; use a whisper model, or set "
            "`translations = true` on its [[models]] entry.",
            param="model",
            code="unsupported_model",
        )
    price: ModelConfig | None = None
    own = await call.find_own_key(deps.provider_keys, model.provider.name)
    if model.trained_with_own_key is not None:
        own = keep_affinity(call, model, own)
    if own is None:
        require_gateway_key(model.provider)  # 503 when its api_key_env is not set
        field = UNIT_PRICE_FIELDS.get(capability)
        if field is None:
            price = require_price(model, output=capability in ("chat", "responses"))
        else:
            price = require_unit_price(model, field)
    return model, price


def _check_serves(model: ResolvedModel, capability: str) -> None:
    """400 `unsupported_model` unless the model's provider does `capability`."""
    kind_can = _KIND_CAPABILITIES.get(model.provider.kind)
    supports = model.provider.supports
    if (kind_can is not None and capability not in kind_can) or (
        supports is not None and _SUPPORTS_NAME.get(capability, capability) not in supports
    ):
        raise capability_missing(model, _DESCRIPTIONS[capability])


async def admit_fallbacks(
    call: Call,
    deps: InferenceDeps,
    model: ResolvedModel,
    requested: Sequence[str],
    *,
    capability: str,
) -> list[ResolvedModel]:
    """The models a request falls back on, in order, once every deployment of the ones
    before failed (gateway/inference/routing.py): the model's own (`fallbacks` of its
    [[models]] entry), skipped when this key may not use one, it does not serve the
    capability or has no price; then the request's own (`fallbacks` in its body), each of
    which must exist (404), be allowed to the key (403), serve the capability and have a price
    (400), `param` naming it (`fallbacks[1]`). A model already in the chain is not repeated.
    Price is not asked with the org's own key for the request's provider (nothing is billed)."""
    chain: list[ResolvedModel] = []
    seen = {model.id}
    configured = model.route.fallbacks if model.route is not None else ()
    for name in configured:
        try:
            fallback = await _admit_fallback(call, deps, name, capability)
        except APIError:
            continue  # the operator's choice, which this key or capability cannot use
        if fallback.id not in seen:
            seen.add(fallback.id)
            chain.append(fallback)
    for index, name in enumerate(requested):
        try:
            fallback = await _admit_fallback(call, deps, name, capability)
        except APIError as exc:
            exc.param = f"fallbacks[{index}]"
            raise
        if fallback.id not in seen:
            seen.add(fallback.id)
            chain.append(fallback)
    return chain


async def _admit_fallback(
    call: Call, deps: InferenceDeps, name: str, capability: str
) -> ResolvedModel:
    if name.startswith(FT_PREFIX):
        model = await resolve_fine_tuned(deps, call.principal.org_id, name)
    else:
        model = deps.registry.resolve(name)
    call.check_model_allowed(model)
    _check_serves(model, capability)
    if call.own_key is None:
        field = UNIT_PRICE_FIELDS.get(capability)
        if field is None:
            require_price(model, output=capability in ("chat", "responses"))
        else:
            require_unit_price(model, field)
    return model


def require_unit_price(model: ResolvedModel, field: str) -> ModelConfig:
    """The model's prices when `field` (or, for images, `usd_per_image_by`) is set; 400
    `model_price_unknown` before any upstream call otherwise."""
    price = model.price
    if price is not None and (
        getattr(price, field) is not None or (field == "usd_per_image" and price.usd_per_image_by)
    ):
        return price
    raise invalid_request(
        f"No price is configured for the model {model.id!r}; add {field} to its [[models]] entry.",
        param="model",
        code="model_price_unknown",
    )


async def reserve(
    call: Call,
    deps: InferenceDeps,
    price: ModelConfig | None,
    *,
    capability: str,
    prompt_bytes: int,
    output_tokens: int,
) -> None:
    """With billing on, hold the request's maximum cost (402 when a budget of the key or the
    balance cannot). With the org's own provider key: nothing is held, never refused (a bill
    of 0, for the usage row). Traced, the hold is the request's `admission` span (budget)."""
    if deps.accountant is None:
        return
    if call.own_key is not None:
        await _own_key_bill(call, deps.accountant, capability)
        return
    assert price is not None and call.ctx.model is not None
    hold = open_bill(
        deps.accountant,
        call.principal.org_id,
        price,
        prompt_bytes=prompt_bytes,
        output_tokens=output_tokens,
        description=_description(capability, call.ctx.model),
        budget=key_budget(call),
    )
    await _held(call, hold)


async def reserve_units(
    call: Call,
    deps: InferenceDeps,
    unit_price: Decimal | None,
    *,
    capability: str,
    units: Decimal,
) -> None:
    """As `reserve`, for a request priced per unit: hold `units` (the most it can use) ×
    `unit_price` (None only with the org's own provider key, which holds nothing)."""
    if deps.accountant is None:
        return
    if call.own_key is not None:
        await _own_key_bill(call, deps.accountant, capability)
        return
    assert unit_price is not None and call.ctx.model is not None
    hold = open_unit_bill(
        deps.accountant,
        call.principal.org_id,
        unit_price,
        units=units,
        description=_description(capability, call.ctx.model),
        budget=key_budget(call),
    )
    await _held(call, hold)


async def _held(call: Call, hold: Awaitable[Bill]) -> None:
    """`call.bill` from `hold` (the budget's admission: a step of the trace when traced)."""
    trace = call.ctx.trace
    if trace is None:
        call.bill = await hold
    else:
        with trace.step("admission", **_BUDGET):
            call.bill = await hold


async def _own_key_bill(call: Call, accountant: Accountant, capability: str) -> None:
    """With the org's own provider key: a bill of 0 (nothing held, never refused; a usage
    row for the record)."""
    assert call.principal is not None
    call.bill = await open_free_bill(
        accountant,
        call.principal.org_id,
        f"{_DESCRIPTIONS[capability].capitalize()}: {call.ctx.model} (own provider key)",
        per_unit=capability in UNIT_PRICE_FIELDS,
    )


@lru_cache(maxsize=1024)
def _description(capability: str, model: str) -> str:
    """A usage row's description, e.g. `Chat completions: gpt-4o-mini`."""
    return f"{_DESCRIPTIONS[capability].capitalize()}: {model}"


def key_budget(call: Call) -> KeyBudget | None:
    """The calling secret key's caps; None when it has none (management keys never do)."""
    key = call.principal.key if call.principal else None
    if key is None or (key.daily_budget_micros is None and key.monthly_budget_micros is None):
        return None
    return KeyBudget(key.id, key.name, key.daily_budget_micros, key.monthly_budget_micros)
