"""What the hot-path routes are given: the core's parts they use, nothing else (the request
layer authenticates and applies the body limit). Built by gateway/inference/area.py; rerank,
audio, images and responses are given the same."""

from __future__ import annotations

from dataclasses import dataclass

from actors.accountant import Accountant
from actors.cooldown_sync import CooldownSync
from actors.relay import StreamRelays
from actors.upstream import Upstreams
from gateway.inference.model_registry import ModelRegistry
from gateway.operations.metrics import Metrics
from gateway.plugins.build import Plugins
from services.provider_keys import ProviderKeyResolver
from storage.fine_tuned_models import FineTunedModelRepository
from storage.idempotency import IdempotencyRepository


@dataclass(frozen=True)
class InferenceDeps:
    registry: ModelRegistry
    upstreams: Upstreams
    relays: StreamRelays
    idempotency: IdempotencyRepository
    sse_keepalive_s: float
    accountant: Accountant | None  # None: billing is off
    provider_keys: ProviderKeyResolver  # bring-your-own-key: the org's own key for a provider
    fine_tuned_models: FineTunedModelRepository  # `ft:` names, per organization
    # Deployments' cooldowns shared through Redis (None: without Redis, or no model of several).
    cooldowns: CooldownSync | None = None
    # Guardrails and the response cache (gateway/plugins/); None: none configured.
    plugins: Plugins | None = None
    # Upstream attempts' durations on /metrics (None: not recorded, e.g. in a unit test).
    metrics: Metrics | None = None
