"""The shared core of one instance: what more than one API area (or the request layer, or the
server) needs, built once by the runtime before any area opens.

Every area is opened with this object (`open_<area>(core, …)`, gateway/areas.py) rather than
with a long list of arguments: an area takes from it what it uses, and a new shared part is one
field here, not one more parameter in every area. What only one area uses is built by that
area (its stores, its actors, its gauges), so this file does not grow with features.

`start_core` starts the core's own actors under the root supervisor — the credential
machinery, the relays, the rate limiter, the accountant, the event writer — and registers the
core's gauges. The resources it is given (storage, Redis clients, upstream pools) are opened and
closed by the runtime (gateway/runtime.py), around the supervisor's nursery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from actors.accountant import Accountant
from actors.credentials import CredentialEpochWatcher, LastUsedRecorder
from actors.event_writer import EventWriter
from actors.keyring_watch import KeyringPoller
from actors.ratelimit import RateLimiter
from actors.relay import StreamRelays
from actors.shared_holds import SharedHolds
from actors.supervisor import Supervisor
from actors.upstream import Upstreams
from gateway.config import Config
from gateway.inference.model_registry import ModelRegistry
from gateway.keyring import Keyring, register_age_gauge
from gateway.operations.actor_metrics import register_actor_gauges
from gateway.operations.metrics import Metrics, duration_buckets
from gateway.operations.readiness import Readiness
from protocol.credentials import CredentialHasher
from protocol.payments import PaymentProcessor
from protocol.secretbox import PROVIDER_KEYS
from services.auth import Authenticator
from services.keyring import KeyringWatch, WatchedBox
from services.provider_keys import ProviderKeyResolver
from storage.open import Storage

if TYPE_CHECKING:  # the OpenTelemetry SDK: imported only when tracing is on
    from gateway.telemetry.tracing import Tracing


@dataclass(frozen=True)
class Core:
    config: Config
    storage: Storage
    supervisor: Supervisor  # the root: every actor of the instance runs under it
    master_key: bytes = field(repr=False)  # loaded once; wraps secrets at rest (never printed)
    keyring_watch: KeyringWatch  # `retired` once a rotation made the master key an old one
    hasher: CredentialHasher
    auth: Authenticator
    last_used: LastUsedRecorder
    metrics: Metrics
    readiness: Readiness  # /livez, /readyz: named reasons other code may set
    registry: ModelRegistry
    upstreams: Upstreams
    relays: StreamRelays  # live streams: inference and responses open them, the drain cuts them
    provider_keys: ProviderKeyResolver  # bring-your-own-key: the org's own key for a provider
    limiter: RateLimiter  # every route's per-key rate limit (the request layer)
    accountant: Accountant
    payments: PaymentProcessor
    shared_holds: SharedHolds | None  # holds across instances (Redis), None without it
    event_writer: EventWriter  # hot-path events (completion.*), written in batches
    tracing: Tracing | None  # `[telemetry]` with an endpoint (gateway/telemetry/)

    def box(self, purpose: str) -> WatchedBox:
        """A box under the master key for `purpose` that refuses once the key is retired (a
        503 for the operator until restarted with the new key)."""
        return WatchedBox(self.master_key, purpose, self.keyring_watch)


async def start_core(
    config: Config,
    storage: Storage,
    supervisor: Supervisor,
    master_key: bytes,
    keyring: Keyring,
    *,
    limiter: RateLimiter,
    shared_holds: SharedHolds | None,
    upstreams: Upstreams,
    payments: PaymentProcessor,
    tracing: Tracing | None,
    cache_poll_interval: float,
    last_used_interval: float,
) -> Core:
    """Build the core and start its actors under the running root supervisor `supervisor`.
    The keyring is the one the master key unlocked (its pepper keys credential hashes)."""
    watch = KeyringWatch(storage.keyring, master_key)
    await supervisor.start(KeyringPoller(watch, interval=config.server.keyring_check_interval_s))
    last_used = LastUsedRecorder(
        storage.keys, settings=config.actors["batch_writer"], interval=last_used_interval
    )
    hasher = CredentialHasher(keyring.pepper)
    auth = Authenticator(storage, hasher, note_use=last_used.note)
    provider_keys = ProviderKeyResolver(
        storage.provider_keys, WatchedBox(master_key, PROVIDER_KEYS, watch)
    )
    watch.on_retired = provider_keys.invalidate_all  # cached provider keys: refused too

    def credentials_changed() -> None:  # a key or a provider key changed somewhere
        auth.invalidate_all()
        provider_keys.invalidate_all()

    await supervisor.start(last_used)
    await supervisor.start(
        CredentialEpochWatcher(storage.keys, credentials_changed, interval=cache_poll_interval)
    )
    relays = StreamRelays()
    accountant = Accountant(
        storage.ledger,
        storage.orgs,
        payments,
        shared_holds,
        max_auto_topups_per_day=config.billing.max_auto_topups_per_day,
        replenish_settings=config.actors["auto_replenish"],
        settings=config.actors["accountant"],
    )
    event_writer = EventWriter(storage.events, settings=config.actors["batch_writer"])
    for actor in (
        relays.supervisor,  # one temporary child per live stream
        limiter,
        accountant,
        *([] if accountant.replenisher is None else [accountant.replenisher]),
        event_writer,
    ):
        await supervisor.start(actor)
    registry = ModelRegistry(config.providers, config.models)
    metrics = Metrics(duration_buckets(p.read_timeout_s for p in config.providers))
    metrics.know((m.id for _, m in registry.configured()), (p.name for p in config.providers))
    register_actor_gauges(metrics, supervisor)
    metrics.gauge(
        "gateway_auth_cache_entries",
        "Credentials held in this instance's cache.",
        lambda: [({}, float(auth.statistics()["cached"]))],
    )
    register_age_gauge(metrics, keyring)  # gateway_master_key_age_seconds
    return Core(
        config=config,
        storage=storage,
        supervisor=supervisor,
        master_key=master_key,
        keyring_watch=watch,
        hasher=hasher,
        auth=auth,
        last_used=last_used,
        metrics=metrics,
        readiness=_readiness(supervisor, watch),
        registry=registry,
        upstreams=upstreams,
        relays=relays,
        provider_keys=provider_keys,
        limiter=limiter,
        accountant=accountant,
        payments=payments,
        shared_holds=shared_holds,
        event_writer=event_writer,
        tracing=tracing,
    )


def _readiness(supervisor: Supervisor, watch: KeyringWatch) -> Readiness:
    readiness = Readiness(supervisor)
    # Until restarted with the new key: what needs it answers 503 master_key_rotated.
    readiness.add_check(
        "master_key",
        lambda: (
            f"this instance runs on a retired master key and must be restarted with the new"
            f" one ({watch.reason})"
            if watch.retired
            else None
        ),
    )
    return readiness
