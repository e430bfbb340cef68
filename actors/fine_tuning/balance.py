"""Telling the accountant of a balance change written outside it (a training hold, refund):
its view of the organization is re-read on the next request, and a shared balance (Redis) is
adjusted at once when it is cached."""

from __future__ import annotations

import logging

from actors.accountant import Accountant
from actors.errors import RedisUnavailable
from actors.fine_tuning.steps import BalanceChanged
from actors.shared_holds import SharedHolds

log = logging.getLogger("gateway.fine_tuning")


def balance_notifier(accountant: Accountant, shared: SharedHolds | None) -> BalanceChanged:
    async def changed(org_id: str, micros: int) -> None:
        accountant.refresh(org_id)
        if shared is None:
            return
        try:
            await shared.credit(org_id, micros)
        except RedisUnavailable as exc:  # re-read from the database when it expires
            log.warning("could not adjust the shared balance of %s: %s", org_id, exc)

    return changed
