"""The inference area: chat completions, embeddings, models. Its deps are what every other
model-calling area (rerank, audio, images, responses) is given too."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.area import Area
from gateway.core import Core
from gateway.inference import routes
from gateway.inference.deployments import register_deployment_gauges
from gateway.inference.deps import InferenceDeps


@dataclass(frozen=True, kw_only=True)
class InferenceArea(Area):
    deps: InferenceDeps


def open_inference(core: Core) -> InferenceArea:
    deps = InferenceDeps(
        registry=core.registry,
        upstreams=core.upstreams,
        relays=core.relays,
        idempotency=core.storage.idempotency,
        sse_keepalive_s=core.config.server.sse_keepalive_s,
        accountant=core.accountant if core.config.billing.enabled else None,
        provider_keys=core.provider_keys,
        fine_tuned_models=core.storage.fine_tuned_models,
    )
    register_deployment_gauges(core.metrics, core.registry)
    return InferenceArea(
        routes=routes.routes(deps), completion_routes=routes.COMPLETION_ROUTES, deps=deps
    )
