"""The inference area: chat completions, embeddings, models. Its deps are what every other
model-calling area (rerank, audio, images, responses) is given too."""

from __future__ import annotations

from dataclasses import dataclass

from actors.cooldown_sync import CooldownSync
from gateway.area import Area
from gateway.core import Core
from gateway.inference import routes
from gateway.inference.deployments import register_deployment_gauges
from gateway.inference.deps import InferenceDeps


@dataclass(frozen=True, kw_only=True)
class InferenceArea(Area):
    deps: InferenceDeps


async def open_inference(core: Core) -> InferenceArea:
    """The area; with Redis and a model of several deployments, its cooldown sharing actor
    (actors/cooldown_sync.py), on the instance's Redis client."""
    cooldowns = None
    balancers = [(model_id, route.balancer) for model_id, route in core.registry.routed()]
    if core.shared_holds is not None and balancers:  # with Redis
        cooldowns = CooldownSync(core.shared_holds.client, balancers)
        await core.supervisor.start(cooldowns)
    deps = InferenceDeps(
        registry=core.registry,
        upstreams=core.upstreams,
        relays=core.relays,
        idempotency=core.storage.idempotency,
        sse_keepalive_s=core.config.server.sse_keepalive_s,
        accountant=core.accountant if core.config.billing.enabled else None,
        provider_keys=core.provider_keys,
        fine_tuned_models=core.storage.fine_tuned_models,
        cooldowns=cooldowns,
    )
    register_deployment_gauges(core.metrics, core.registry)
    return InferenceArea(
        routes=routes.routes(deps), completion_routes=routes.COMPLETION_ROUTES, deps=deps
    )
