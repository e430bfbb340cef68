"""Balance changes made by an operator's command, beside the running instances (grant-credits,
refund): written to the ledger, and to the shared balance in Redis when configured, so that
instances sharing Redis see it at once; the others see it within their balance TTL."""

from __future__ import annotations

import sys

from actors.errors import RedisUnavailable
from actors.shared_holds import SharedHolds
from services.payment_ledger import Credit
from storage.ledger import LedgerRepository, Transaction


def offline_credit(ledger: LedgerRepository, shared: SharedHolds | None) -> Credit:
    async def credit(
        org_id: str,
        type: str,
        micros: int,
        description: str,
        *,
        id: str | None = None,
        payment_ref: str | None = None,
    ) -> Transaction:
        row = await ledger.apply(org_id, type, micros, description, id=id, payment_ref=payment_ref)
        if shared is not None:
            try:
                await shared.credit(org_id, micros)
            except RedisUnavailable as exc:
                print(f"gateway: stored, but Redis was not updated: {exc}", file=sys.stderr)
        return row

    return credit
