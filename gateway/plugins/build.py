"""The instance's plugin pipeline from its config: the `[[guardrails]]` in their order, then the
response cache (input guardrails run before a lookup, so a refused request is never answered
from the cache), then mirroring (after the answer; a cache hit is not mirrored). None when
nothing is configured: routes then skip every plugin step."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial

import msgspec

from actors.background_tasks import BackgroundTasks
from actors.event_writer import EventWriter
from actors.opt_in_refresh import OptInRefresh
from actors.supervisor import Supervisor
from actors.upstream import Upstreams
from gateway.config import Config
from gateway.inference.model_registry import ModelRegistry
from gateway.mirror.area import MirrorArea
from gateway.operations.metrics import Metrics
from gateway.plugins.classifiers import classifier
from gateway.plugins.mirroring import MirrorPlugin
from gateway.plugins.reporting import GuardrailReports
from protocol.errors import UpstreamMalformed
from services.cache.plugin import Embed, ResponseCachePlugin
from services.cache.semantic import encode_vector
from services.cache.store import ResponseCache
from services.guardrails.opt_ins import OptIns
from services.plugins.interface import Plugin
from services.plugins.pipeline import Pipeline
from storage.errors import StorageUnavailable
from storage.org_guardrails import OrgGuardrailRepository


@dataclass(frozen=True)
class Plugins:
    pipeline: Pipeline | None
    reports: GuardrailReports
    cache: ResponseCachePlugin | None = None
    opt_ins: OptIns | None = None  # with an opt-in guardrail: who turned which on


async def open_plugins(
    config: Config,
    registry: ModelRegistry,
    upstreams: Upstreams,
    writer: EventWriter,
    supervisor: Supervisor,
    metrics: Metrics,
    store: ResponseCache | None,
    mirror: MirrorArea | None = None,
    *,
    org_guardrails: OrgGuardrailRepository,
) -> Plugins:
    reports = GuardrailReports(writer)
    plugins: list[Plugin] = []
    opt_ins = None
    if any(g.opt_in for g in config.guardrails):
        opt_ins = OptIns()
        refresh = OptInRefresh(org_guardrails, opt_ins)
        with contextlib.suppress(StorageUnavailable):  # the actor tries again
            await refresh.refresh()
        await supervisor.start(refresh)
    if config.guardrails:
        # Imported only with a guardrail: the recognizers' tables (phone metadata among them)
        # cost ~8 MiB and ~0.1 s at start-up, which an instance without guardrails need not pay.
        from services.guardrails.plugin import Guardrail

        for g in config.guardrails:
            opted_in = None
            if g.opt_in:
                assert opt_ins is not None
                opted_in = partial(opt_ins.enabled, g.name)
            plugins.append(Guardrail(g, reports, classifier(g, upstreams), opted_in=opted_in))
    cache = None
    ttls = _cache_ttls(config)
    if store is not None and ttls:
        tasks = BackgroundTasks()
        await supervisor.start(tasks)
        settings = config.cache
        embed = None
        if settings.mode == "semantic" and settings.embeddings_model is not None:
            embed = _embedder(registry, upstreams, settings.embeddings_model)
        cache = ResponseCachePlugin(
            store,
            ttls,
            tasks.spawn,
            explicit_only=settings.explicit_only,
            max_entry_bytes=settings.max_entry_bytes,
            embed=embed,
            threshold=settings.semantic_threshold,
        )
        plugins.append(cache)
    if mirror is not None and mirror.mirror is not None:
        plugins.append(MirrorPlugin(mirror))
    pipeline = Pipeline(plugins, reports) if plugins else None
    plugins_out = Plugins(pipeline, reports, cache, opt_ins)
    register_plugin_metrics(metrics, plugins_out)
    return plugins_out


def _cache_ttls(config: Config) -> dict[str, float]:
    """The lifetime of each caching model's entries (a model's `cache` or `[cache] enabled`)."""
    default = config.cache
    return {
        m.id: m.cache_ttl_s or default.ttl_s
        for m in config.models
        if (m.cache if m.cache is not None else default.enabled)
    }


class _Embedding(msgspec.Struct):
    embedding: list[float]


class _Embeddings(msgspec.Struct):
    data: list[_Embedding]


def _embedder(registry: ModelRegistry, upstreams: Upstreams, model_id: str) -> Embed:
    """A query's embedding from the configured embeddings model's first deployment (the
    gateway's own cost: not billed to the organization, docs/cache.md)."""
    model = registry.resolve(model_id)
    deployment = model.route.deployments[0] if model.route is not None else model
    client = upstreams.get(deployment.provider.name)
    upstream = deployment.upstream

    async def embed(text: str) -> bytes:
        body = msgspec.json.encode({"model": upstream, "input": text})
        content, _ = await client.post_json("embeddings", body)
        try:
            answer = msgspec.json.decode(content, type=_Embeddings)
        except msgspec.DecodeError:
            raise UpstreamMalformed("the embeddings answer is not an embeddings list") from None
        if not answer.data:
            raise UpstreamMalformed("the embeddings answer is empty")
        return encode_vector(answer.data[0].embedding)

    return embed


def register_plugin_metrics(metrics: Metrics, plugins: Plugins) -> None:
    """What the plugins did since this instance started: counters (`..._total`), read at
    scrape time."""
    pipeline = plugins.pipeline
    if pipeline is None:
        return
    stats = pipeline.stats
    metrics.counter(
        "gateway_plugin_calls",
        "Hook calls per plugin since start",
        lambda: [({"plugin": name}, float(s.calls)) for name, s in stats.items()],
    )
    metrics.counter(
        "gateway_plugin_failures",
        "Plugin hooks that failed or timed out (then on_error applied)",
        lambda: [({"plugin": name}, float(s.failures)) for name, s in stats.items()],
    )
    metrics.counter(
        "gateway_plugin_seconds",
        "Time spent in each plugin's hooks since start",
        lambda: [({"plugin": name}, s.seconds) for name, s in stats.items()],
    )
    findings = plugins.reports.findings
    metrics.counter(
        "gateway_guardrail_findings",
        "Guardrail findings by guardrail, category and action (block, redact, log)",
        lambda: [
            ({"guardrail": g, "category": c, "action": a}, float(n))
            for (g, c, a), n in findings.items()
        ],
    )
    cache = plugins.cache
    if cache is not None:
        s = cache.stats
        metrics.counter(
            "gateway_cache_requests",
            "Requests the response cache answered (hit), missed, or was not asked (bypass)",
            lambda: [
                ({"result": "hit"}, float(s.hits)),
                ({"result": "miss"}, float(s.misses)),
                ({"result": "bypass"}, float(s.bypasses)),
            ],
        )
        metrics.counter(
            "gateway_cache_saved_usd",
            "Provider cost the response cache's hits did not incur",
            lambda: [({}, s.saved_usd)],
        )
        metrics.counter(
            "gateway_cache_stores",
            "Answers stored in the response cache",
            lambda: [({}, float(s.stores))],
        )
