"""The fine-tuning area: the jobs API and the watcher actor that follows each job at its
provider. Training files are read from the files area's store."""

from __future__ import annotations

from dataclasses import dataclass

from actors.fine_tuning import FineTuningWatcher, WatcherDeps
from actors.fine_tuning.balance import balance_notifier
from actors.webhooks.clock import WallClock
from gateway.area import Area
from gateway.core import Core
from gateway.files.area import FilesArea
from gateway.fine_tuning.deps import FineTuningDeps
from gateway.fine_tuning.routes import routes


@dataclass(frozen=True, kw_only=True)
class FineTuningArea(Area):
    watcher: FineTuningWatcher  # follows fine-tuning jobs at their providers


async def open_fine_tuning(core: Core, files: FilesArea) -> FineTuningArea:
    config, storage = core.config, core.storage
    watcher = FineTuningWatcher(
        WatcherDeps(
            repo=storage.fine_tuning,
            files=files.store,
            upstreams=core.upstreams,
            provider_keys=core.provider_keys,
            registrar=storage.fine_tuned_models,
            config=config.fine_tuning,
            clock=WallClock(),
            balance_changed=balance_notifier(core.accountant, core.shared_holds),
        )
    )
    await core.supervisor.start(watcher)
    deps = FineTuningDeps(
        jobs=storage.fine_tuning,
        files=files.store,
        registry=core.registry,
        accountant=core.accountant,
        billing=config.billing.enabled,
        provider_keys=core.provider_keys,
        wake_watcher=watcher.wake,
        clock=watcher.clock,
        balance_changed=watcher.deps.balance_changed,
        config=config.fine_tuning,
        sse_keepalive_s=config.server.sse_keepalive_s,
    )
    return FineTuningArea(routes=routes(deps), watcher=watcher)
