"""The mirroring area (docs/mirroring.md): GET /v1/admin/mirrors always; with a model that has
`[[models.mirrors]]`, the mirror actor (actors/mirror.py), its results writer and the
retention sweep, started under `core.supervisor`, and the mirror gauges on /metrics.

The inference routes call `MirrorArea.offer_mirrors` once a request was answered: for each
mirror of the model the client named whose `sample_rate` samples the request id, one job is
offered to the actor (never waiting, never raising; dropped and counted when it is full).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from actors.mirror import Mirror, MirrorRetention, results_writer
from gateway.area import Area
from gateway.config import ModelConfig
from gateway.config.policies import MirrorConfig
from gateway.core import Core
from gateway.mirror.routes import routes
from gateway.mirror.shadow import ShadowCaller
from gateway.operations.metrics import Metrics
from protocol.secretbox import MIRROR_ANSWERS
from services.mirror import MirrorJob, MirrorRoute, sampled
from storage.mirror_results import MirrorResultRepository

# The retention bound: a row goes after RETENTION_DAYS, and past the MAX_ROWS_PER_PAIR most
# recent of its (model, shadow) (which also bounds what the admin route reads), every
# RETENTION_INTERVAL_S.
RETENTION_DAYS = 30
MAX_ROWS_PER_PAIR = 10_000
RETENTION_INTERVAL_S = 600.0


@dataclass(frozen=True, kw_only=True)
class MirrorArea(Area):
    mirror: Mirror | None  # None: no model has mirrors
    results: MirrorResultRepository
    # By the model ids a client may name (a [[models]] id, and a one-deployment model's
    # `<provider>/<upstream>`): its mirrors.
    mirrors: Mapping[str, tuple[MirrorConfig, ...]]

    def mirrors_of(self, model: str) -> tuple[MirrorConfig, ...]:
        return self.mirrors.get(model, ())

    def offer_mirrors(
        self,
        *,
        org_id: str,
        key_id: str | None,
        request_id: str,
        route: MirrorRoute,
        model: str,
        body: bytes,
        latency_ms: float,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float,
        answer: bytes | None,
    ) -> int:
        """Offer a job per mirror of `model` that samples `request_id`; how many were taken.
        No I/O, never waits: call it after the answer went."""
        if self.mirror is None:
            return 0
        taken = 0
        for config in self.mirrors.get(model, ()):
            if not sampled(config.sample_rate, request_id):
                continue
            job = MirrorJob(
                org_id=org_id,
                key_id=key_id,
                request_id=request_id,
                route=route,
                model=model,
                shadow=config.model,
                billed=config.billed,
                body=body,
                primary_latency_ms=latency_ms,
                primary_prompt_tokens=prompt_tokens,
                primary_completion_tokens=completion_tokens,
                primary_cost_usd=cost_usd,
                primary_answer=answer,
            )
            taken += self.mirror.offer(job)
        return taken


def _by_name(models: tuple[ModelConfig, ...]) -> dict[str, tuple[MirrorConfig, ...]]:
    """Each [[models]] id with mirrors, and a one-deployment model's `<provider>/<upstream>`
    when the entry it resolves to (the first with it, as the registry decides) has some."""
    out = {m.id: m.mirrors for m in models if m.mirrors}
    first: dict[str, ModelConfig] = {}
    for m in models:
        if not m.deployments:
            first.setdefault(f"{m.provider}/{m.upstream}", m)
    for canonical, m in first.items():
        if m.mirrors:
            out.setdefault(canonical, m.mirrors)
    return out


async def open_mirror(core: Core) -> MirrorArea:
    repo = MirrorResultRepository(core.storage.db)
    mirrors = _by_name(core.config.models)
    mirror = None
    if mirrors:
        writer = results_writer(repo, settings=core.config.actors["batch_writer"])
        await core.supervisor.start(writer)
        accountant = core.accountant if core.config.billing.enabled else None
        mirror = Mirror(
            ShadowCaller(core.registry, core.upstreams, accountant),
            writer,
            core.box(MIRROR_ANSWERS),
        )
        await core.supervisor.start(mirror)
        await core.supervisor.start(
            MirrorRetention(
                repo,
                max_age_s=RETENTION_DAYS * 86_400.0,
                max_rows_per_pair=MAX_ROWS_PER_PAIR,
                interval_s=RETENTION_INTERVAL_S,
            )
        )
        register_mirror_metrics(core.metrics, mirror)
    return MirrorArea(routes=routes(repo), mirror=mirror, results=repo, mirrors=mirrors)


def register_mirror_metrics(metrics: Metrics, mirror: Mirror) -> None:
    """`gateway_mirror_calls_total{model,shadow,outcome}`, `gateway_mirror_dropped_total{stage}`
    (counters: this instance's, since it started), `gateway_mirror_in_flight` (a gauge)."""
    metrics.counter(
        "gateway_mirror_calls",
        "Shadow calls made by this instance since start, by model, shadow and outcome.",
        lambda: [
            ({"model": model, "shadow": shadow, "outcome": outcome}, float(count))
            for (model, shadow, outcome), count in sorted(mirror.calls.items())
        ],
    )
    metrics.counter(
        "gateway_mirror_dropped",
        "Mirror jobs dropped since start: stage inbox (the actor was full, no call made) or"
        " results (the call's row was not written, its writer was full).",
        lambda: [
            ({"stage": "inbox"}, float(mirror.dropped)),
            ({"stage": "results"}, float(mirror.results_dropped)),
        ],
    )
    metrics.gauge(
        "gateway_mirror_in_flight",
        "Shadow calls in progress.",
        lambda: [({}, float(mirror.in_flight))],
    )
