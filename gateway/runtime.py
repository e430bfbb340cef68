"""The root of one gateway instance: the shared core (gateway/core.py), then every API area
opened on it (`_open_areas`: one line per area).

`open_runtime` is entered once per process (per worker) and owns the root nursery; leaving it
stops every actor (they get a bounded, shielded moment to flush), then closes what the areas
own (the blob store), then the upstream pools, Redis clients and the database, and last the
tracer (gateway/telemetry/: the spans still queued are sent).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, fields
from typing import Any

import trio

from actors.ratelimit import open_rate_limiter
from actors.shared_holds import open_shared_holds
from actors.supervisor import Supervisor
from actors.upstream import UpstreamClient, Upstreams
from gateway.area import A, Areas
from gateway.audio.area import open_audio
from gateway.cache.area import open_cache
from gateway.config import Config, ProviderConfig
from gateway.config.master_key import load_master_key
from gateway.core import Core, start_core
from gateway.credits.area import open_credits
from gateway.credits.processor import open_processor
from gateway.files.area import open_files
from gateway.fine_tuning.area import open_fine_tuning
from gateway.guardrails.area import open_guardrails
from gateway.images.area import open_images
from gateway.inference.area import open_inference
from gateway.keyring import unlock
from gateway.keys.area import open_keys
from gateway.mirror.area import open_mirror
from gateway.provider_keys.area import open_provider_keys
from gateway.rerank.area import open_rerank
from gateway.responses.area import open_responses
from gateway.telemetry.setup import open_tracing
from gateway.usage.area import open_usage
from gateway.webhooks.area import open_webhooks
from protocol.credentials import CredentialHasher
from storage.open import Storage, open_storage


@dataclass(frozen=True)
class Runtime(Core):
    """The core, plus the opened areas (`area(FilesArea).store`, …)."""

    areas: Areas

    def area(self, kind: type[A]) -> A:
        return self.areas.get(kind)


@asynccontextmanager
async def _open_areas(core: Core) -> AsyncIterator[Areas]:
    """Every API area, in the order its routes are served and documented (the operations area
    is the app's: gateway/app.py). An area is given the core and the areas it needs."""
    async with AsyncExitStack() as owned:
        cache = open_cache(core)
        mirror = await open_mirror(core)
        inference = await open_inference(core, cache.cache, mirror)
        files = await owned.enter_async_context(open_files(core))
        yield Areas(
            (
                inference,
                open_rerank(core, inference),
                open_audio(core, inference),
                open_keys(core),
                open_provider_keys(core),
                await open_credits(core),
                open_usage(core),
                files,
                open_images(core, inference, files),
                await open_responses(core, inference),
                await open_fine_tuning(core, files),
                await open_webhooks(core),
                mirror,
                cache,
                open_guardrails(core, inference),
            )
        )


async def credential_hasher(storage: Storage, master_key: bytes) -> CredentialHasher:
    """Keyed by the keyring's pepper; WrongMasterKey if `master_key` is not the keyring's."""
    return CredentialHasher((await unlock(storage.keyring, master_key)).pepper)


@asynccontextmanager
async def open_runtime(
    config: Config, *, cache_poll_interval: float = 1.0, last_used_interval: float = 1.0
) -> AsyncIterator[Runtime]:
    master_key = load_master_key(config.master_key, config.data_dir)
    async with (
        # Outermost: shut down (its queued spans sent) once everything else stopped.
        open_tracing(config.telemetry) as tracing,
        open_storage(config.database_url, timeout_s=config.database.statement_timeout_s) as storage,
        open_rate_limiter(config.redis_url, settings=config.actors["rate_limiter"]) as limiter,
        open_shared_holds(config.redis_url) as shared_holds,
        Upstreams({p.name: _client(p) for p in config.providers}) as upstreams,
        open_processor(config, storage) as payments,
        # The areas' resources are entered inside the nursery (their actors need the running
        # supervisor) but left after it: once no actor can use them any more.
        AsyncExitStack() as area_resources,
        trio.open_nursery() as nursery,
    ):
        keyring = await unlock(storage.keyring, master_key)  # WrongMasterKey: a clear stop
        supervisor = Supervisor("root", settings=config.actors)
        await nursery.start(supervisor.run)
        core = await start_core(
            config,
            storage,
            supervisor,
            master_key,
            keyring,
            limiter=limiter,
            shared_holds=shared_holds,
            upstreams=upstreams,
            payments=payments,
            tracing=tracing,
            cache_poll_interval=cache_poll_interval,
            last_used_interval=last_used_interval,
        )
        areas = await area_resources.enter_async_context(_open_areas(core))
        nursery.start_soon(core.metrics.publish_gauges)  # every area's gauges registered
        parts: dict[str, Any] = {f.name: getattr(core, f.name) for f in fields(Core)}
        try:
            yield Runtime(**parts, areas=areas)
        finally:
            nursery.cancel_scope.cancel()


def _client(provider: ProviderConfig) -> UpstreamClient:
    return UpstreamClient(
        provider.name,
        provider.kind,
        provider.base_url,
        provider.api_key,
        max_connections=provider.max_connections,
        max_keepalive_connections=provider.max_keepalive_connections,
        connect_timeout_s=provider.connect_timeout_s,
        read_timeout_s=provider.read_timeout_s,
        max_response_bytes=provider.max_response_bytes,
        keepalive_expiry_s=provider.keepalive_expiry_s,
    )
