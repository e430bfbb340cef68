"""What an operator sees of the deployments of models of several: `/v1/admin/actors`'
`services.deployments` (each deployment's breaker state, rest left, trips, health and whether
it is health-checked, in flight, time to first byte) and `/metrics`
(`gateway_deployment_state`, `gateway_deployment_healthy`, `gateway_deployment_in_flight`), per
instance (each instance keeps its own counts; health is shared: docs/routing.md)."""

from __future__ import annotations

import trio

from gateway.config.routing import HealthCheckConfig
from gateway.inference.model_registry import ModelRegistry, Route
from gateway.operations.metrics import Metrics

_STATES = {"closed": 0.0, "half_open": 1.0, "open": 2.0}


def deployment_statistics(registry: ModelRegistry) -> dict[str, object]:
    now = trio.current_time()
    out: dict[str, object] = {}
    for model_id, route in registry.routed():
        out[model_id] = {
            "strategy": route.balancer.strategy,
            "deployments": [
                {
                    "deployment": t.name,
                    "state": t.breaker.state,
                    "resting_s": round(max(0.0, t.breaker.open_until - now), 3)
                    if t.breaker.state == "open"
                    else 0.0,
                    "trips": t.breaker.trips,
                    "healthy": t.healthy,
                    "health_checked": check is not None,
                    "in_flight": t.in_flight,
                    "ttfb_ms": None if t.ttfb_ewma is None else round(t.ttfb_ewma * 1000, 3),
                    "priority": t.priority,
                    "weight": t.weight,
                }
                for t, check in zip(route.balancer.targets, _checks(route), strict=True)
            ],
        }
    return out


def _checks(route: Route) -> tuple[HealthCheckConfig | None, ...]:
    """Each deployment's `health_check` (a route of one deployment has none)."""
    return route.health_checks or (None,) * len(route.balancer.targets)


def register_deployment_gauges(metrics: Metrics, registry: ModelRegistry) -> None:
    def state() -> list[tuple[dict[str, str], float]]:
        return [
            ({"model": model_id, "deployment": t.name}, _STATES[t.breaker.state])
            for model_id, route in registry.routed()
            for t in route.balancer.targets
        ]

    def healthy() -> list[tuple[dict[str, str], float]]:
        return [
            ({"model": model_id, "deployment": t.name}, 1.0 if t.healthy else 0.0)
            for model_id, route in registry.routed()
            for t in route.balancer.targets
        ]

    def in_flight() -> list[tuple[dict[str, str], float]]:
        return [
            ({"model": model_id, "deployment": t.name}, float(t.in_flight))
            for model_id, route in registry.routed()
            for t in route.balancer.targets
        ]

    metrics.gauge(
        "gateway_deployment_state",
        "Each deployment's breaker on this instance: 0 closed, 1 half-open (probing), 2 open.",
        state,
    )
    metrics.gauge(
        "gateway_deployment_healthy",
        "Each deployment's health (1 in rotation, 0 taken out by its health check).",
        healthy,
    )
    metrics.gauge(
        "gateway_deployment_in_flight", "Requests in flight to each deployment.", in_flight
    )
