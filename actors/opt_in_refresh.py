"""Keeps the instance's snapshot of opt-in guardrails (services/guardrails/opt_ins.py) in step
with the database, where another instance may have changed it: one read of the whole table
every `interval_s` (a row per organization and opt-in guardrail: small). A failed read keeps
the last snapshot and tries again next time."""

from __future__ import annotations

import logging

import trio

from actors.base import Actor
from services.guardrails.opt_ins import OptIns
from storage.errors import StorageUnavailable
from storage.org_guardrails import OrgGuardrailRepository

log = logging.getLogger(__name__)


class OptInRefresh(Actor):
    kind = "background"

    def __init__(
        self, repo: OrgGuardrailRepository, opt_ins: OptIns, *, interval_s: float = 2.0
    ) -> None:
        self.name = "guardrail-opt-ins"
        self._repo = repo
        self._opt_ins = opt_ins
        self._interval_s = interval_s
        self.refreshes = 0
        self.failures = 0

    def statistics(self) -> dict[str, object]:
        return {"refreshes": self.refreshes, "failures": self.failures}

    async def refresh(self) -> None:
        self._opt_ins.replace(await self._repo.snapshot())
        self.refreshes += 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                await self.refresh()
            except StorageUnavailable:
                self.failures += 1
                log.warning("opt-in guardrails: the database did not answer; kept the last view")
            await trio.sleep(self._interval_s)
