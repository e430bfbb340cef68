"""`gateway admin refund TXN_ID [--amount USD]`: give back (part of) a top-up through the payment
processor and write its `refund` row (docs/billing.md, "Refunds").

The refund's idempotency key is the top-up, what its rows refunded so far and the amount: the
same command run again after a crash (refunded at Stripe, no row yet) finds the same refund
instead of making a second, and its row is written once (services/payment_ledger.py), as the
`charge.refunded` webhook that follows would write it. The running instances see the new
balance within their balance TTL, at once with Redis.
"""

from __future__ import annotations

import sys
from decimal import Decimal

from actors.shared_holds import open_shared_holds
from gateway.config import Config
from gateway.credits.offline import offline_credit
from gateway.credits.processor import open_processor
from protocol.billing import TOPUP
from protocol.errors import PaymentDeclined, PaymentUnavailable
from protocol.money import micros_to_usd, usd_to_micros
from protocol.payments import MICROS_PER_CENT
from services.payment_ledger import record_refund
from storage.open import open_storage


def _fail(message: str) -> int:
    print(f"gateway: {message}", file=sys.stderr)
    return 1


async def refund_command(config: Config, txn_id: str, amount: Decimal | None) -> int:
    async with (
        open_storage(config.database_url) as storage,
        open_shared_holds(config.redis_url) as shared,
        open_processor(config, storage) as payments,
    ):
        txn = await storage.ledger.find(txn_id)
        if txn is None or txn.type != TOPUP or txn.payment_ref is None:
            return _fail(f"{txn_id!r} is not a top-up paid through the payment processor")
        payment = txn.payment_ref
        left = txn.amount_micros - await storage.ledger.refunded_micros(payment)
        micros = left if amount is None else usd_to_micros(amount)
        if micros <= 0 or micros > left or micros % MICROS_PER_CENT:
            return _fail(
                f"the amount must be whole cents between 0.01 and what is left of the top-up"
                f" ({micros_to_usd(max(left, 0)):.2f} USD)"
            )
        key = f"refund:{txn.id}:{txn.amount_micros - left}:{micros}"
        try:
            refund = await payments.refund_payment(payment, micros, key)
        except PaymentDeclined as exc:
            return _fail(f"the processor refused the refund ({exc.reason}): {exc}")
        except PaymentUnavailable as exc:
            return _fail(f"{exc} Nothing was refunded; run the command again.")

        credit = offline_credit(storage.ledger, shared)
        row, _ = await record_refund(storage.ledger, credit, txn.org_id, refund)
    print(f"{row.id}: refunded {micros_to_usd(refund.micros):.2f} USD of {txn.id} ({refund.id})")
    print(f"balance: {micros_to_usd(row.balance_after_micros):.6f} USD")
    return 0
