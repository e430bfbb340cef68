"""The cache area: the instance's response cache (services/cache/store.py) over the store
`[cache] store` names, its purge API, and its gauges.

`cache` is None when no model caches (`[cache] enabled` false and no `[[models]]` entry with
`cache = true`): the request path then never looks. The purge API is served either way, over
the same store, so entries stored while the cache was on can still be deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.webhooks.clock import WallClock
from gateway.area import Area
from gateway.cache.routes import routes
from gateway.config import Config
from gateway.core import Core
from gateway.operations.metrics import Metrics
from services.cache.sealing import CacheSealer
from services.cache.store import ResponseCache
from storage.response_cache import CacheStore, ResponseCacheRepository
from storage.response_cache_redis import RedisCacheStore


@dataclass(frozen=True, kw_only=True)
class CacheArea(Area):
    cache: ResponseCache | None  # what the request path uses; None: no model caches
    store: ResponseCache  # the same object, also when the cache is off (purges, tests)


def cache_enabled(config: Config) -> bool:
    """Whether any model caches: `[cache] enabled`, or a model's own `cache = true`."""
    default = config.cache.enabled
    return any(default if m.cache is None else m.cache for m in config.models)


def open_cache(core: Core) -> CacheArea:
    config = core.config.cache
    store: CacheStore
    if config.store == "redis":
        # The loader requires redis_url with store = "redis", so the shared client exists.
        assert core.shared_holds is not None, "[cache] store = redis needs redis_url"
        store = RedisCacheStore(core.shared_holds.client, core.storage.db)
    else:
        store = ResponseCacheRepository(core.storage.db)
    watch = core.keyring_watch
    cache = ResponseCache(
        store,
        CacheSealer(core.master_key, retired=lambda: watch.retired),
        WallClock().now_us,
        max_entries=config.max_entries,
        max_bytes=config.max_bytes,
        max_entry_bytes=config.max_entry_bytes,
    )
    register_cache_metrics(core.metrics, cache)
    enabled = cache_enabled(core.config)
    return CacheArea(routes=routes(cache), cache=cache if enabled else None, store=cache)


def register_cache_metrics(metrics: Metrics, cache: ResponseCache) -> None:
    """The store's size as this instance last measured it (plus its puts since): gauges; and
    what its cache did since it started, by operation: a counter
    (`gateway_cache_operations_total`)."""
    metrics.gauge(
        "gateway_cache_entries",
        "Response cache entries (the store's, as this instance last measured them).",
        lambda: [({}, float(cache.entries))],
    )
    metrics.gauge(
        "gateway_cache_bytes",
        "Response cache stored bytes, sealed (as this instance last measured them).",
        lambda: [({}, float(cache.stored_bytes))],
    )
    metrics.counter(
        "gateway_cache_operations",
        "Response cache operations on this instance since it started, by outcome (hits,"
        " misses, stores, oversize, evictions, expired, purged, failures, unopenable).",
        lambda: [({"outcome": k}, float(v)) for k, v in cache.counters.as_dict().items()],
    )
