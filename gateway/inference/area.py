"""The inference area: chat completions, embeddings, models. Its deps are what every other
model-calling area (rerank, audio, images, responses) is given too."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from actors.cooldown_sync import CooldownSync
from actors.health_check import CheckSpec, HealthCheck
from actors.webhooks.dispatcher import new_owner
from gateway.area import Area
from gateway.core import Core
from gateway.inference import routes
from gateway.inference.deployments import register_deployment_gauges
from gateway.inference.deps import InferenceDeps
from gateway.mirror.area import MirrorArea
from gateway.plugins.build import open_plugins
from services.cache.store import ResponseCache
from storage.endpoint_health import Endpoint, EndpointHealthRepository
from storage.org_guardrails import OrgGuardrailRepository


@dataclass(frozen=True, kw_only=True)
class InferenceArea(Area):
    deps: InferenceDeps


async def open_inference(
    core: Core, store: ResponseCache | None = None, mirror: MirrorArea | None = None
) -> InferenceArea:
    """The area; with Redis and a model of several deployments, its cooldown sharing actor
    (actors/cooldown_sync.py), on the instance's Redis client; a health-check actor per
    deployment with `health_check` (actors/health_check.py); the plugins (guardrails, the
    response cache in `store`, mirroring through `mirror`: gateway/plugins/)."""
    cooldowns = None
    balancers = [(model_id, route.balancer) for model_id, route in core.registry.routed()]
    if core.shared_holds is not None and balancers:  # with Redis
        cooldowns = CooldownSync(core.shared_holds.client, balancers)
        await core.supervisor.start(cooldowns)
    await start_health_checks(core)
    plugins = await open_plugins(
        core.config,
        core.registry,
        core.upstreams,
        core.event_writer,
        core.supervisor,
        core.metrics,
        store,
        mirror,
        org_guardrails=OrgGuardrailRepository(core.storage.db),
    )
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
        plugins=plugins if plugins.pipeline is not None else None,
        metrics=core.metrics,
    )
    register_deployment_gauges(core.metrics, core.registry)
    return InferenceArea(
        routes=routes.routes(deps), completion_routes=routes.COMPLETION_ROUTES, deps=deps
    )


async def start_health_checks(core: Core) -> None:
    """One actor per health-checked deployment, all with this instance's lease owner id."""
    repo = EndpointHealthRepository(core.storage.db)
    owner = new_owner()
    for model_id, route in core.registry.routed():
        for deployment, target, check in zip(
            route.deployments, route.balancer.targets, route.health_checks, strict=False
        ):
            if check is None:
                continue
            provider = deployment.provider
            endpoint = Endpoint(
                model_id,
                provider.name,
                deployment.upstream,
                urlsplit(provider.base_url).hostname or "",
            )
            spec = CheckSpec(
                check.interval_s,
                check.timeout_s,
                check.unhealthy_after,
                check.healthy_after,
                check.kind,
            )
            client = core.upstreams.get(provider.name)
            await core.supervisor.start(
                HealthCheck(repo, target, endpoint, client, spec, owner=owner)
            )
