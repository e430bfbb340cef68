"""The root of one gateway instance: storage, credentials, the supervisor and its actors.

`open_runtime` is entered once per process (per worker) and owns the root nursery; leaving it
stops every actor (they get a bounded, shielded moment to flush) and closes the database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

import trio

from actors.accountant import Accountant
from actors.credentials import CredentialEpochWatcher, LastUsedRecorder
from actors.event_writer import EventWriter
from actors.files_janitor import FilesJanitor
from actors.fine_tuning import FineTuningWatcher, WatcherDeps
from actors.fine_tuning.balance import balance_notifier
from actors.keyring_watch import KeyringPoller
from actors.ratelimit import RateLimiter, open_rate_limiter
from actors.relay import StreamRelays
from actors.responses_janitor import ResponsesJanitor
from actors.shared_holds import open_shared_holds
from actors.supervisor import Supervisor
from actors.upstream import UpstreamClient, Upstreams
from actors.webhooks import WebhookDispatcher, WebhookSettings, open_webhooks
from actors.webhooks.clock import WallClock
from gateway.config import Config, ProviderConfig, WebhooksConfig
from gateway.config.master_key import load_master_key
from gateway.files import FileStore, open_file_store
from gateway.images import ImageStore
from gateway.inference.model_registry import ModelRegistry
from gateway.keyring import register_age_gauge, unlock
from gateway.operations.actor_metrics import register_actor_gauges
from gateway.operations.metrics import Metrics
from gateway.operations.readiness import Readiness
from protocol.credentials import CredentialHasher
from protocol.secretbox import FILE_KEYS, PROVIDER_KEYS
from services.auth import Authenticator
from services.keyring import KeyringWatch, WatchedBox
from services.payments import PaymentProcessor, open_processor
from services.provider_keys import ProviderKeyResolver
from services.responses import ResponseStore
from storage.open import Storage, open_storage


@dataclass(frozen=True)
class Runtime:
    config: Config
    storage: Storage
    hasher: CredentialHasher
    auth: Authenticator
    supervisor: Supervisor
    metrics: Metrics
    last_used: LastUsedRecorder
    registry: ModelRegistry
    upstreams: Upstreams
    relays: StreamRelays
    limiter: RateLimiter
    accountant: Accountant
    payments: PaymentProcessor
    provider_keys: ProviderKeyResolver  # bring-your-own-key: the org's own key for a provider
    event_writer: EventWriter  # hot-path events (completion.*), written in batches
    webhooks: WebhookDispatcher  # delivers the outbox to the subscriptions this instance holds
    files: FileStore  # uploaded files: rows, encrypted blobs (local or S3), the quota
    master_key: bytes = field(repr=False)  # loaded once; wraps secrets at rest (never printed)
    images: ImageStore  # generated images kept for their `url` (in the files' blob store)
    responses: ResponseStore  # stored responses (the conversation of `previous_response_id`)
    fine_tuning: FineTuningWatcher  # follows fine-tuning jobs at their providers
    readiness: Readiness  # /livez, /readyz: named reasons other code may set
    keyring_watch: KeyringWatch  # `retired` once a rotation made the master key an old one


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


async def credential_hasher(storage: Storage, master_key: bytes) -> CredentialHasher:
    """Keyed by the keyring's pepper; WrongMasterKey if `master_key` is not the keyring's."""
    return CredentialHasher((await unlock(storage.keyring, master_key)).pepper)


@asynccontextmanager
async def open_runtime(
    config: Config, *, cache_poll_interval: float = 1.0, last_used_interval: float = 1.0
) -> AsyncIterator[Runtime]:
    master_key = load_master_key(config.master_key, config.data_dir)
    async with (
        open_storage(config.database_url, timeout_s=config.database.statement_timeout_s) as storage,
        open_rate_limiter(config.redis_url, settings=config.actors["rate_limiter"]) as limiter,
        open_shared_holds(config.redis_url) as shared_holds,
        open_file_store(config, storage.files, master_key) as plain_files,
        Upstreams({p.name: _client(p) for p in config.providers}) as upstreams,
        trio.open_nursery() as nursery,
    ):
        keyring = await unlock(storage.keyring, master_key)  # WrongMasterKey: a clear stop
        hasher = CredentialHasher(keyring.pepper)
        supervisor = Supervisor("root", settings=config.actors)
        await nursery.start(supervisor.run)
        watch = KeyringWatch(storage.keyring, master_key)
        await supervisor.start(
            KeyringPoller(watch, interval=config.server.keyring_check_interval_s)
        )
        # Every box under the master key refuses once the key is retired (a 503 for the operator).
        files = replace(plain_files, box=WatchedBox(master_key, FILE_KEYS, watch))
        last_used = LastUsedRecorder(
            storage.keys, settings=config.actors["batch_writer"], interval=last_used_interval
        )
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
        payments = open_processor(config.billing.payment_provider)
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
        webhooks, janitor = open_webhooks(
            storage.webhooks,
            master_key,
            webhook_settings(config.webhooks),
        )
        images = ImageStore(
            storage.images,
            files.blobs,
            WatchedBox(master_key, FILE_KEYS, watch),
            lifetime_us=config.images.url_lifetime_s * 1_000_000,
        )
        files_janitor = FilesJanitor(
            files.repo, files.blobs, images=storage.images, owner=files.owner
        )
        # Wall time that moves with Trio's clock: a MockClock drives retention in tests.
        responses = ResponseStore(
            storage.responses, WatchedBox(master_key, FILE_KEYS, watch), WallClock().now_us
        )
        responses_janitor = ResponsesJanitor(storage.responses, responses.clock)
        fine_tuning = FineTuningWatcher(
            WatcherDeps(
                repo=storage.fine_tuning,
                files=files,
                upstreams=upstreams,
                provider_keys=provider_keys,
                registrar=storage.fine_tuned_models,
                config=config.fine_tuning,
                clock=WallClock(),
                balance_changed=balance_notifier(accountant, shared_holds),
            )
        )
        for actor in (
            relays.supervisor,  # one temporary child per live stream
            limiter,
            accountant,
            *([] if accountant.replenisher is None else [accountant.replenisher]),
            event_writer,
            webhooks,
            janitor,
            files_janitor,
            responses_janitor,
            fine_tuning,
        ):
            await supervisor.start(actor)
        metrics = Metrics()
        _register_gauges(metrics, supervisor, auth)
        _register_webhook_gauges(metrics, webhooks)
        register_age_gauge(metrics, keyring)  # gateway_master_key_age_seconds
        nursery.start_soon(metrics.publish_gauges)
        registry = ModelRegistry(config.providers, config.models)
        try:
            yield Runtime(
                config,
                storage,
                hasher,
                auth,
                supervisor,
                metrics,
                last_used,
                registry,
                upstreams,
                relays,
                limiter,
                accountant,
                payments,
                provider_keys,
                event_writer,
                webhooks,
                files,
                master_key,
                images,
                responses,
                fine_tuning,
                _readiness(supervisor, watch),
                watch,
            )
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


def webhook_settings(config: WebhooksConfig) -> WebhookSettings:
    return WebhookSettings(
        allowed_private_networks=config.allowed_private_networks,
        allow_http=config.allow_http,
        allowed_ports=config.allowed_ports,
        poll_interval_s=config.poll_interval_s,
        lease_ttl_s=config.lease_ttl_s,
        attempt_timeout_s=config.attempt_timeout_s,
        retention_days=config.retention_days,
    )


def _register_webhook_gauges(metrics: Metrics, webhooks: WebhookDispatcher) -> None:
    """Attempts by outcome on this instance, and the queues of the subscriptions it holds."""

    def attempts() -> list[tuple[dict[str, str], float]]:
        return [({"outcome": k}, float(v)) for k, v in webhooks.metrics.attempts.items()]

    def queues(field: str) -> list[tuple[dict[str, str], float]]:
        out = []
        now_us = webhooks.clock.now_us()
        for webhook_id, stats in sorted(webhooks.subscription_stats().items()):
            if field == "pending":
                value = stats.get("pending")
            else:
                oldest = stats.get("oldest_pending_created_at")
                value = None if oldest is None else max(0, now_us - int(str(oldest))) / 1e6
            if isinstance(value, int | float):
                out.append(({"webhook_id": webhook_id}, float(value)))
        return out

    metrics.gauge(
        "gateway_webhook_deliveries",
        "Webhook delivery attempts by outcome since this instance started.",
        attempts,
    )
    metrics.gauge(
        "gateway_webhook_queue_depth",
        "Pending deliveries of each subscription this instance delivers.",
        lambda: queues("pending"),
    )
    metrics.gauge(
        "gateway_webhook_oldest_pending_seconds",
        "Age of the oldest pending delivery of each subscription this instance delivers.",
        lambda: queues("oldest"),
    )


def _register_gauges(metrics: Metrics, supervisor: Supervisor, auth: Authenticator) -> None:
    register_actor_gauges(metrics, supervisor)
    metrics.gauge(
        "gateway_auth_cache_entries",
        "Credentials held in this instance's cache.",
        lambda: [({}, float(auth.statistics()["cached"]))],
    )
