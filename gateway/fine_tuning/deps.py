"""What the Fine-tuning routes are given (built by the area, gateway/fine_tuning/area.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from actors.accountant import Accountant
from actors.fine_tuning.settings import FineTuningConfig
from actors.fine_tuning.steps import BalanceChanged
from actors.webhooks.clock import WallClock
from gateway.inference.model_registry import ModelRegistry
from services.files import FileStore
from services.provider_keys import ProviderKeyResolver
from storage.fine_tuning import FineTuningRepository


@dataclass(frozen=True)
class FineTuningDeps:
    jobs: FineTuningRepository
    files: FileStore
    registry: ModelRegistry
    accountant: Accountant
    billing: bool  # `[billing] enabled`: hold and charge training
    provider_keys: ProviderKeyResolver
    wake_watcher: Callable[[], None]  # a job was created or cancelled: look now
    clock: WallClock  # the watcher's, so stored times agree with its leases and polls
    balance_changed: BalanceChanged
    config: FineTuningConfig
    sse_keepalive_s: float
