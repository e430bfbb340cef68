"""Crediting what a payment processor charged, exactly once: the ledger row's id comes from
the charge's reference, and a charge whose credit may not have landed is refunded unless its
row is there. Used by top-ups (gateway/credits/topups.py) and auto-replenish (actors/accountant.py).
"""

from __future__ import annotations

import logging

import trio

from protocol.payments import PaymentProcessor, credit_id
from storage.ledger import LedgerRepository

log = logging.getLogger(__name__)

# Undoing a charge (look up its row, refund) usually runs because a time limit ran out, so
# it gets its own; past it the processor is not answering and an operator must reconcile.
UNDO_S = 10.0


async def refund_unless_credited(
    ledger: LedgerRepository, payments: PaymentProcessor, org_id: str, reference: str
) -> None:
    """Refund the charge unless its credit row exists. Shielded from cancellation and bounded
    by UNDO_S; logs what it could not do (with the reference, to reconcile), never raises.
    A processor that reconciles is never asked: a charge that happened is credited by its
    webhook or the reconciler (actors/payment_reconciler.py) instead."""
    if payments.reconciles:
        log.warning("charge %s of %s not credited yet: left to the reconciler", reference, org_id)
        return
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + UNDO_S
        try:
            if await ledger.transaction(org_id, credit_id(reference)) is not None:
                return
        except Exception:
            # Unknown: refund. If the row did land, the org has credit it was not charged
            # for (the platform's loss, logged here), never the reverse.
            log.exception("could not tell whether charge %s was credited; refunding", reference)
        try:
            await payments.refund(org_id, reference)
            return
        except Exception:
            log.exception("could not refund charge %s of %s: reconcile", reference, org_id)
            return
    log.error("undoing charge %s of %s took over %s s: reconcile", reference, org_id, UNDO_S)
