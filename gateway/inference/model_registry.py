"""Which provider serves a `model` the client names, and at what price.

Clients name a model by an alias from `[[models]]` (`gpt-4o-mini`) or as
`<provider>/<upstream model>` (`openai/gpt-4o-mini`). Either resolves to one canonical id,
`<provider>/<upstream model>`, which is what responses and chunks report as `model`. A
fine-tuned model (`ft:…`, registered per organization in storage) is routed by `fine_tuned`
once its record was read: it keeps its `ft:` name as id. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from dataclasses import replace as replace_dc

from msgspec.structs import replace

from gateway.config import ModelConfig, ProviderConfig
from gateway.config.routing import HealthCheckConfig
from protocol.audio.transcription import supports_translation
from protocol.errors import APIError, invalid_request
from protocol.price_catalogue import catalogue_price
from services.routing.balancer import Balancer, Target
from services.routing.breaker import Breaker
from storage.fine_tuned_models import FineTunedModel

# A model's routing fields as they are when not set (retries of a model of one deployment,
# e.g. one a request names in its `fallbacks`).
DEFAULT_POLICY = ModelConfig(id="-", provider="-")


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """What serves a model. With one deployment, `id` is canonical: "<provider>/<upstream>".
    A model of several (`[[models.deployments]]`) has `route`, its id is its `[[models]]` id,
    and `provider`, `upstream` are its first deployment's; its `price` holds the highest input
    and output prices of its deployments (what a request reserves)."""

    id: str
    provider: ProviderConfig
    upstream: str
    price: ModelConfig | None  # None: no price known
    aliases: tuple[str, ...] = ()
    translations: bool = False  # may serve /v1/audio/translations
    route: Route | None = None
    # A fine-tuned model lives in the provider account that trained it: True, the org's own
    # key's (only that key may call it); False, the gateway's; None, any key.
    trained_with_own_key: bool | None = None

    def names(self) -> tuple[str, ...]:
        """Every identifier that names this model (for `allowed_models`)."""
        return (self.id, *self.aliases)

    @property
    def deployment(self) -> str:
        """The deployment that serves it, as answers name it (`x-gateway-deployment`)."""
        return f"{self.provider.name}/{self.upstream}"


@dataclass(frozen=True, slots=True)
class Route:
    """A model's deployments (each a `ResolvedModel` with the model's id and the deployment's
    provider, upstream name and prices), the balancer choosing among them, and the retry
    policy (gateway/inference/routing.py drives them)."""

    deployments: tuple[ResolvedModel, ...]
    balancer: Balancer
    max_attempts: int
    retry_budget_s: float
    retry_on_status: frozenset[int]
    stream_failover: bool
    fallbacks: tuple[str, ...] = ()  # other models' ids, tried in order when these all failed
    # Each deployment's `health_check` (None: not checked), in `deployments` order.
    health_checks: tuple[HealthCheckConfig | None, ...] = ()


def may_use(names: tuple[str, ...], allowed_models: tuple[str, ...] | None) -> bool:
    """Whether a key limited to `allowed_models` (None: any model) may use a model known by
    `names` (any one of them listed is enough)."""
    return allowed_models is None or any(name in allowed_models for name in names)


def require_allowed(model: ResolvedModel, allowed_models: tuple[str, ...] | None) -> None:
    """APIError 403 `model_not_allowed` (param `model`) unless `may_use`."""
    if not may_use(model.names(), allowed_models):
        raise APIError(
            403,
            f"This key may not use the model {model.id!r}.",
            type="permission_error",
            code="model_not_allowed",
            param="model",
        )


def model_not_found(name: str, *, status: int = 404) -> APIError:
    """404 on every route that names a model, but 400 where the API's error table says an
    invalid model is a bad request (rerank: docs/decisions.md)."""
    return APIError(
        status,
        f"The model {name!r} does not exist or is not served by this gateway.",
        type="not_found_error" if status == 404 else "invalid_request_error",
        code="model_not_found",
        param="model",
    )


def capability_missing(model: ResolvedModel, capability: str) -> APIError:
    return invalid_request(
        f"The model {model.id!r} does not support {capability}.",
        param="model",
        code="unsupported_model",
    )


class ModelRegistry:
    def __init__(self, providers: Iterable[ProviderConfig], models: Iterable[ModelConfig]) -> None:
        self._providers = {p.name: p for p in providers}
        self._by_alias: dict[str, ResolvedModel] = {}
        self._by_canonical: dict[str, ResolvedModel] = {}
        aliases: dict[str, list[str]] = {}
        for m in models:
            if not m.deployments:
                aliases.setdefault(f"{m.provider}/{m.upstream}", []).append(m.id)
        for m in models:
            if m.deployments:
                self._by_alias[m.id] = self._routed(m)
                continue
            canonical = f"{m.provider}/{m.upstream}"
            provider = self._providers[m.provider]
            resolved = ResolvedModel(
                canonical,
                provider,
                m.upstream,
                _with_catalogue(m, provider.kind),
                tuple(aliases[canonical]),
                supports_translation(m.upstream, m.translations),
            )
            if m.fallbacks:  # one deployment, and other models to fall back on
                resolved = replace_dc(resolved, route=single_route(resolved, m))
            self._by_alias[m.id] = resolved
            self._by_canonical.setdefault(canonical, resolved)

    def _routed(self, m: ModelConfig) -> ResolvedModel:
        """A model of several deployments, with its route."""
        deployments = []
        targets = []
        for index, d in enumerate(m.deployments):
            provider = self._providers[d.provider]
            own = d.input_usd_per_mtok is not None
            price = replace(
                m,
                provider=d.provider,
                upstream=d.upstream,
                deployments=(),
                input_usd_per_mtok=d.input_usd_per_mtok if own else m.input_usd_per_mtok,
                output_usd_per_mtok=d.output_usd_per_mtok if own else m.output_usd_per_mtok,
            )
            priced = _with_catalogue(price, provider.kind)
            deployments.append(
                ResolvedModel(
                    m.id,
                    provider,
                    d.upstream,
                    priced,
                    (),
                    supports_translation(d.upstream, m.translations),
                )
            )
            breaker = Breaker(
                trip_failures=m.trip_failures,
                trip_window=m.trip_window,
                cooldown_s=m.cooldown_s,
                max_cooldown_s=m.max_cooldown_s,
            )
            targets.append(
                Target(
                    index,
                    d.name,
                    breaker,
                    priority=d.priority,
                    weight=d.weight,
                    cost=_cost(priced),
                    rpm=d.rpm,
                    tpm=d.tpm,
                )
            )
        route = Route(
            tuple(deployments),
            Balancer(targets, m.strategy),
            m.max_attempts,
            m.retry_budget_s,
            frozenset(m.retry_on_status),
            m.stream_failover,
            m.fallbacks,
            tuple(d.health_check for d in m.deployments),
        )
        first = deployments[0]
        return ResolvedModel(
            m.id,
            first.provider,
            first.upstream,
            highest_prices(m, [d.price for d in deployments]),
            (),
            all(d.translations for d in deployments),
            route,
        )

    @property
    def providers(self) -> list[ProviderConfig]:
        return list(self._providers.values())

    def resolve(self, name: str) -> ResolvedModel:
        """The model `name` designates; APIError 404 `model_not_found` if none."""
        found = self._by_alias.get(name) or self._by_canonical.get(name)
        if found is not None:
            return found
        provider_name, sep, upstream = name.partition("/")
        provider = self._providers.get(provider_name)
        if not sep or not upstream or provider is None:
            raise model_not_found(name)
        listed = _with_catalogue(ModelConfig(name, provider_name, upstream), provider.kind)
        return ResolvedModel(
            name,
            provider,
            upstream,
            listed if _priced(listed) else None,
            translations=supports_translation(upstream),
        )

    def fine_tuned(self, record: FineTunedModel) -> ResolvedModel | None:
        """The route of an organization's fine-tuned model: its provider, the provider's id for
        it upstream, its `ft:` name as id. Priced by a `[[models]]` entry whose id is that name
        when it sets token prices (only its prices count: the model is still only its
        organization's), else by its base model's prices. None when its provider is no longer
        configured."""
        provider = self._providers.get(record.provider)
        if provider is None:
            return None
        configured = self._by_alias.get(record.id)
        if configured is not None and configured.price and _priced(configured.price):
            price: ModelConfig | None = configured.price
        else:
            try:
                price = self.resolve(record.base_model).price
            except APIError:
                price = None
        return ResolvedModel(
            record.id, provider, record.upstream_model, price, trained_with_own_key=record.own_key
        )

    def routed(self) -> list[tuple[str, Route]]:
        """The models of several deployments, with their routes, in configuration order."""
        return [(alias, m.route) for alias, m in self._by_alias.items() if m.route is not None]

    def configured(self) -> list[tuple[str, ResolvedModel]]:
        """The `[[models]]` entries as (alias, model), in configuration order."""
        return list(self._by_alias.items())


def single_route(model: ResolvedModel, policy: ModelConfig = DEFAULT_POLICY) -> Route:
    """The route of a model of one deployment (`model` itself), with `policy`'s routing fields
    (the defaults when the model names no fallbacks: it is then only routed as a request's
    own fallback or with some)."""
    breaker = Breaker(
        trip_failures=policy.trip_failures,
        trip_window=policy.trip_window,
        cooldown_s=policy.cooldown_s,
        max_cooldown_s=policy.max_cooldown_s,
    )
    return Route(
        (model,),
        Balancer([Target(0, model.deployment, breaker)]),
        policy.max_attempts,
        policy.retry_budget_s,
        frozenset(policy.retry_on_status),
        policy.stream_failover,
        policy.fallbacks,
    )


def _cost(price: ModelConfig) -> float:
    """A deployment's price for the `cost` strategy: input + output per million tokens
    (unpriced: last)."""
    if price.input_usd_per_mtok is None:
        return float("inf")
    return float(price.input_usd_per_mtok + (price.output_usd_per_mtok or 0))


def highest_prices(model: ModelConfig, prices: Sequence[ModelConfig | None]) -> ModelConfig | None:
    """`model` with the highest input and output prices of `prices` (a model's deployments,
    or a request's models and fallbacks), for reservations: whichever answers, the hold
    covers it. None if one is unpriced."""
    inputs = [p.input_usd_per_mtok for p in prices if p is not None]
    if len(inputs) < len(prices) or any(i is None for i in inputs):
        return None
    outputs = [p.output_usd_per_mtok for p in prices if p is not None]
    return replace(
        model,
        input_usd_per_mtok=max(i for i in inputs if i is not None),
        output_usd_per_mtok=None if None in outputs else max(o for o in outputs if o is not None),
    )


def _priced(model: ModelConfig) -> bool:
    return model.input_usd_per_mtok is not None


def _with_catalogue(model: ModelConfig, kind: str) -> ModelConfig:
    """The entry's token prices, or the shipped catalogue's when it gives none."""
    if _priced(model):
        return model
    listed = catalogue_price(kind, model.upstream)
    if listed is None:
        return model
    return replace(model, input_usd_per_mtok=listed[0], output_usd_per_mtok=listed[1])


def require_price(model: ResolvedModel, *, output: bool) -> ModelConfig:
    """Requests are billed per token: a model without prices is refused before any upstream
    call (bring-your-own-key requests, which pay no price, do not ask: gateway/inference/
    admission.py)."""
    price = model.price
    if (
        price is None
        or price.input_usd_per_mtok is None
        or (output and price.output_usd_per_mtok is None)
    ):
        raise invalid_request(
            f"No price is configured or listed for the model {model.id!r}; add input_usd_per_mtok"
            + (" and output_usd_per_mtok" if output else "")
            + " to its [[models]] entry.",
            param="model",
            code="model_price_unknown",
        )
    return price
