"""What payments do to the ledger, each written once whoever writes it (the top-up request,
a processor's webhook, the reconciler, an operator's refund): every row's id is derived from
the processor's own id for it (`credit_id`), so a second write raises UniqueViolation and is
answered with the row already there. Rows carry the payment (`payment_ref`).

The balance may go below zero (a refund or dispute of credit already spent): inference is
then refused 402 `insufficient_credits` until a top-up brings it back (docs/billing.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Protocol

from protocol.billing import ADJUSTMENT, REFUND, TOPUP
from protocol.money import micros_to_usd
from protocol.payments import Refund, credit_id, description
from storage.errors import UniqueViolation
from storage.ledger import LedgerRepository, Transaction

log = logging.getLogger(__name__)


class Credit(Protocol):
    """The accountant's `credit`: writes the row and updates its view of the balance."""

    def __call__(
        self,
        org_id: str,
        type: str,
        micros: int,
        description: str,
        *,
        id: str | None = None,
        payment_ref: str | None = None,
    ) -> Awaitable[Transaction]: ...


async def _once(
    ledger: LedgerRepository,
    credit: Credit,
    org_id: str,
    type: str,
    micros: int,
    text: str,
    *,
    key: str,
    payment_ref: str,
) -> tuple[Transaction, bool]:
    """The row (and whether this call wrote it)."""
    txn_id = credit_id(key)
    try:
        return await credit(org_id, type, micros, text, id=txn_id, payment_ref=payment_ref), True
    except UniqueViolation:
        found = await ledger.transaction(org_id, txn_id)
        if found is None:
            raise
        return found, False


async def credit_payment(
    ledger: LedgerRepository,
    credit: Credit,
    org_id: str,
    payment_id: str,
    micros: int,
    kind: str,
    card: str,
    *,
    credit_ref: str | None = None,
) -> tuple[Transaction, bool]:
    """Credit a payment that succeeded (a top-up or an automatic one), once. The row's id comes
    from `credit_ref` (protocol/payments.py `Payment`), by default the payment's id."""
    return await _once(
        ledger,
        credit,
        org_id,
        TOPUP,
        micros,
        description(kind, card),
        key=credit_ref or payment_id,
        payment_ref=payment_id,
    )


async def record_refund(
    ledger: LedgerRepository, credit: Credit, org_id: str, refund: Refund
) -> tuple[Transaction, bool]:
    """Take a refund back off the balance, once per refund."""
    return await _once(
        ledger,
        credit,
        org_id,
        REFUND,
        -refund.micros,
        f"Refund of {refund.payment_id} ({refund.id})",
        key=f"refund:{refund.id}",
        payment_ref=refund.payment_id,
    )


async def record_dispute(
    ledger: LedgerRepository,
    credit: Credit,
    org_id: str,
    *,
    dispute_id: str,
    payment_id: str,
    micros: int,
    reason: str,
    won: bool = False,
) -> tuple[Transaction, bool]:
    """A dispute opened takes the disputed amount off (Stripe holds it); one won gives it
    back. Each once per dispute."""
    return await _once(
        ledger,
        credit,
        org_id,
        ADJUSTMENT,
        micros if won else -micros,
        f"Dispute {dispute_id} of {payment_id} {'won' if won else f'opened ({reason})'}",
        key=f"dispute:{'won' if won else 'opened'}:{dispute_id}",
        payment_ref=payment_id,
    )


async def replenish_failed(
    ledger: LedgerRepository, org_id: str, *, code: str, message: str, micros: int
) -> bool:
    """An automatic top-up was declined: auto-replenish is switched off, with the reason on the
    account and `billing.auto_replenish_failed` (once; False when it was off already)."""
    note = f"Auto-replenish was turned off: the automatic top-up was declined ({code}): {message}"
    data = {"code": code, "message": message, "amount_usd": micros_to_usd(micros)}
    done = await ledger.disable_replenish(org_id, note, data)
    if done:
        log.warning("auto-replenish of %s declined (%s): turned off", org_id, code)
    return done
