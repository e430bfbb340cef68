"""The actor that checks every `interval` seconds whether the master key was rotated away
(`[server] keyring_check_interval_s`); what "retired" means and does is services/keyring.py."""

from __future__ import annotations

import logging

import trio

from actors.base import Actor
from services.keyring import KeyringWatch

log = logging.getLogger("gateway.keyring")


class KeyringPoller(Actor):
    def __init__(self, watch: KeyringWatch, *, interval: float = 30.0) -> None:
        self.name = "keyring-watch"
        self.watch = watch
        self._interval = interval

    def statistics(self) -> dict[str, object]:
        return self.watch.statistics()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while not self.watch.retired:
            await trio.sleep(self._interval)
            try:
                await self.watch.check()
            except Exception:  # a database outage is /readyz's to report, not a key change
                log.warning("the keyring could not be read; checking again later", exc_info=True)
