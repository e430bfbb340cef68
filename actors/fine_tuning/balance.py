"""Telling the accountant of a balance change written outside it (a training hold, refund):
its views of the organization and of the job's key are re-read on their next use, and the
shared balance and key spend (Redis) are adjusted at once where they are cached."""

from __future__ import annotations

import logging

from actors.accountant import Accountant
from actors.errors import RedisUnavailable
from actors.fine_tuning.steps import BalanceChanged
from actors.shared_holds import SharedHolds
from storage.fine_tuning import JobRecord

log = logging.getLogger("gateway.fine_tuning")


def balance_notifier(accountant: Accountant, shared: SharedHolds | None) -> BalanceChanged:
    async def changed(job: JobRecord, micros: int) -> None:
        """`micros` moved the job's org's balance (negative: the hold taken) and, the other
        way, its key's spend for the day and month the job was created."""
        accountant.refresh(job.org_id)
        if job.key_id is not None:
            accountant.refresh_key(job.key_id)
        if shared is None:
            return
        try:
            await shared.credit(job.org_id, micros)
        except RedisUnavailable as exc:  # kept, and reconciled once Redis answers
            log.warning("could not adjust the shared balance of %s yet: %s", job.org_id, exc)
        if job.key_id is not None:
            try:
                await shared.add_spend(job.key_id, -micros, job.created_at)
            except RedisUnavailable as exc:
                log.warning("could not adjust the shared spend of %s yet: %s", job.key_id, exc)

    return changed
