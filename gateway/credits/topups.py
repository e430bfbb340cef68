"""Top-ups: charge a payment method, credit the ledger, complete the `Idempotency-Key`. No
HTTP here (the route in gateway/credits/routes.py parses and renders); errors are `APIError`.

Money rule: no path takes a payment without crediting it. The whole flow runs shielded from
the caller's cancellation (a client that leaves does not interrupt it) under its own deadline
(`FINISH_S`). What makes any interruption recoverable:

- the processor's charge is idempotent per reference (`topup:{org}:{Idempotency-Key}`): a
  retry finds the same charge (with Stripe, the same PaymentIntent);
- the ledger row's id is derived from the payment's `credit_ref` (the test processor: the
  reference; Stripe: the PaymentIntent's id), so a payment is credited at most once, whoever
  credits it and however often it is retried;
- on a failure after the charge may have happened (an error or the deadline, in the charge or
  the credit), the key is released, and
  - Stripe: nothing is undone. A payment that succeeded is credited by its webhook or by the
    reconciler (actors/payment_reconciler.py), whatever happened here;
  - the test processor (which has neither): the charge is refunded unless its ledger row
    exists, and a retry with the same key charges again and credits exactly once. A refund
    that fails (the processor cannot be reached within `UNDO_S`) is logged with the reference
    for an operator.
- 3-D Secure (Stripe): nothing is taken yet; the answer is 402 `payment_requires_action` with
  the PaymentIntent's `client_secret`, and the credit comes with the webhook once the
  cardholder finished.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import msgspec
import trio

from actors.accountant import Accountant
from actors.charge_credit import refund_unless_credited
from gateway.web.idempotency import stored_response
from protocol import errors
from protocol.billing import MAX_TOPUP_MICROS, MIN_TOPUP_MICROS
from protocol.billing_api import TopupResult
from protocol.errors import (
    PaymentDeclined,
    PaymentRequiresAction,
    PaymentUnavailable,
    UnknownPaymentMethod,
)
from protocol.ids import new_id
from protocol.labels import check_idempotency_key
from protocol.money import micros_to_usd
from protocol.payments import MICROS_PER_CENT, TOPUP_KIND, PaymentMethod, PaymentProcessor
from protocol.timefmt import now_us, to_iso
from services.payment_ledger import credit_payment
from storage.idempotency import COMPLETED
from storage.ledger import Transaction
from storage.open import Storage

log = logging.getLogger(__name__)

IDEMPOTENCY_TTL_US = 24 * 3600 * 1_000_000
# While in progress, a claim lives this long: beyond FINISH_S + UNDO_S + COMPENSATE_S, so
# only a top-up whose process died holds it that long, and its retry then runs (and finds
# the same charge and row) instead of a 409 for a day.
IN_PROGRESS_TTL_US = 2 * 60 * 1_000_000
# A top-up is a processor round trip and three short writes: 30 s is far beyond a healthy
# run, and bounds how long a stopping server waits for one it cannot interrupt.
FINISH_S = 30.0
# Releasing the key of an undone top-up gets its own time (it usually runs because FINISH_S
# ran out); the refund has actors.charge_credit.UNDO_S.
COMPENSATE_S = 10.0


@dataclass(frozen=True, slots=True)
class TopupOutcome:
    result: TopupResult
    replayed: bool  # answered from the Idempotency-Key's stored result


def check_amount(micros: int) -> None:
    if micros < MIN_TOPUP_MICROS:
        raise errors.invalid_request(
            "The minimum top-up is 5.00 USD.", param="amount_usd", code="amount_too_small"
        )
    if micros % MICROS_PER_CENT:
        raise errors.invalid_request(
            "`amount_usd` must be a whole number of cents.", param="amount_usd"
        )
    if micros > MAX_TOPUP_MICROS:
        raise errors.invalid_request(
            "The maximum top-up is 100000.00 USD.", param="amount_usd", code="amount_too_large"
        )


async def top_up(
    storage: Storage,
    accountant: Accountant,
    payments: PaymentProcessor,
    *,
    org_id: str,
    method: PaymentMethod,
    micros: int,
    key: str | None,
    body: bytes,
) -> TopupOutcome:
    """Charge `method` and credit `micros` to the org, once per `key` (the `Idempotency-Key`;
    `body` is the request it was sent with). Cancelling the caller does not interrupt it: it
    finishes, or is undone, within FINISH_S + UNDO_S + COMPENSATE_S. Raises APIError: 400 (amount,
    key), 402 (declined), 409 (key reused or in progress), 503 (did not finish in time)."""
    check_amount(micros)
    if key is not None:
        check_idempotency_key(key, "Idempotency-Key")
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + FINISH_S
        if key is None:
            flow = _Flow(storage, accountant, payments, org_id, f"topup:{org_id}:{new_id('k')}")
            return TopupOutcome(await flow.run(method, micros), replayed=False)
        return await _idempotent(storage, accountant, payments, org_id, method, micros, key, body)
    log.error("top-up of %s for %s did not finish within %s s", micros, org_id, FINISH_S)
    raise errors.APIError(
        503,
        "The top-up did not finish in time and was undone; retry with the same Idempotency-Key.",
        type="server_error",
        code="topup_timeout",
    )


async def _idempotent(
    storage: Storage,
    accountant: Accountant,
    payments: PaymentProcessor,
    org_id: str,
    method: PaymentMethod,
    micros: int,
    key: str,
    body: bytes,
) -> TopupOutcome:
    stored_key = "topup:" + key  # its own namespace beside chat's metadata keys
    fingerprint = hashlib.sha256(body).hexdigest()
    flow = _Flow(storage, accountant, payments, org_id, f"topup:{org_id}:{key}", stored_key)
    try:
        claim = await storage.idempotency.claim(
            org_id, stored_key, fingerprint, now_us=now_us(), ttl_us=IN_PROGRESS_TTL_US
        )
    except BaseException:
        # The claim's INSERT may have committed: release it, or the key stays locked. Safe
        # even if another request holds it: charges and credits are once per reference.
        await flow.compensate(charged=False)
        raise
    if not claim.won:
        stored = stored_response(claim, "top-up")
        return TopupOutcome(msgspec.json.decode(stored, type=TopupResult), replayed=True)
    result = await flow.run(method, micros)
    try:
        await storage.idempotency.finish(
            org_id,
            stored_key,
            COMPLETED,
            msgspec.json.encode(result).decode(),
            expires_us=now_us() + IDEMPOTENCY_TTL_US,
        )
    except BaseException:
        # Charged and credited: only the key is left. Releasing it lets a retry find the
        # same charge and the same row (and answer them) instead of a 409 for a day.
        await flow.compensate(charged=False)
        raise
    return TopupOutcome(result, replayed=False)


class _Flow:
    """One top-up attempt: its reference, its ledger row's id, and how to undo it."""

    def __init__(
        self,
        storage: Storage,
        accountant: Accountant,
        payments: PaymentProcessor,
        org_id: str,
        reference: str,
        stored_key: str | None = None,
    ) -> None:
        self._storage = storage
        self._accountant = accountant
        self._payments = payments
        self.org_id = org_id
        self.reference = reference  # the processor's idempotency key
        self._stored_key = stored_key

    async def run(self, method: PaymentMethod, micros: int) -> TopupResult:
        try:
            payment = await self._payments.charge(self.org_id, method, micros, self.reference)
        except PaymentDeclined as exc:
            await self.compensate(charged=False)
            raise declined(exc) from None
        except PaymentRequiresAction as exc:  # nothing taken yet; credited when it succeeds
            await self.compensate(charged=False)
            raise errors.APIError(
                402,
                "The payment needs the cardholder to authenticate it (3-D Secure): finish it"
                " with the `client_secret` (Stripe.js `handleNextAction`); the credit is added"
                " when it succeeds.",
                type="billing_error",
                code="payment_requires_action",
                param="payment_method_id",
                extra={"payment_intent": exc.payment_id, "client_secret": exc.client_secret},
            ) from None
        except UnknownPaymentMethod as exc:
            await self.compensate(charged=False)
            raise unknown_method(str(exc)) from None
        except PaymentUnavailable:
            await self.compensate(charged=True)  # the charge may have happened
            raise errors.APIError(
                503,
                "The payment processor could not be reached; nothing was credited. Retry with"
                " the same Idempotency-Key: a charge that did happen is never taken twice.",
                type="server_error",
                code="payment_provider_unavailable",
                headers={"Retry-After": "5"},
            ) from None
        except BaseException:
            await self.compensate(charged=True)  # the charge may have happened
            raise
        try:
            txn, _ = await credit_payment(
                self._storage.ledger,
                self._accountant.credit,
                self.org_id,
                payment.id,
                micros,
                TOPUP_KIND,
                method.label,
                credit_ref=payment.credit_ref,
            )
        except BaseException:
            await self.compensate(charged=True)
            raise
        return _result(txn)

    async def compensate(self, *, charged: bool) -> None:
        """Undo what may have happened: refund the charge unless its row is in the ledger,
        then release the key. Shielded, bounded (UNDO_S, COMPENSATE_S); logs what it could
        not do; never raises."""
        if charged:
            await refund_unless_credited(
                self._storage.ledger, self._payments, self.org_id, self.reference
            )
        if self._stored_key is None:
            return
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + COMPENSATE_S
            try:
                await self._storage.idempotency.release(self.org_id, self._stored_key)
            except Exception:
                log.exception("could not release top-up key %s", self._stored_key)
        if scope.cancelled_caught:
            log.error("releasing top-up key %s took over %s s", self._stored_key, COMPENSATE_S)


def declined(exc: PaymentDeclined) -> errors.APIError:
    """402 with the processor's code and, when there is one, the issuer's `decline_code`."""
    return errors.APIError(
        402,
        f"The payment method was declined: {exc}",
        type="billing_error",
        code=exc.code,
        param="payment_method_id",
        extra={"decline_code": exc.decline_code} if exc.decline_code else None,
    )


def unknown_method(method_id: str) -> errors.APIError:
    return errors.invalid_request(
        f"No payment method {method_id!r} for this organization.",
        param="payment_method_id",
        code="payment_method_not_found",
    )


def _result(txn: Transaction) -> TopupResult:
    return TopupResult(
        transaction_id=txn.id,
        amount_usd=micros_to_usd(txn.amount_micros),
        new_balance_usd=micros_to_usd(txn.balance_after_micros),
        created_at=to_iso(txn.created_at) or "",
    )
