"""Credits and billing: the account, its settings, top-ups, the transaction list and the
subscription. Reads need `billing:read`, changes `billing:write` (management keys hold both)."""

from __future__ import annotations

import hashlib
from datetime import date, datetime

import msgspec
from msgspec import UnsetType
from quart import Blueprint, Response, request

from actors.accountant import Accountant
from gateway.auth import Authenticator
from gateway.http import authenticate, json_response, query_int
from gateway.payments import (
    PaymentDeclined,
    PaymentMethod,
    PaymentProcessor,
    UnknownPaymentMethod,
)
from gateway.routing import Operation, Routes
from protocol import errors
from protocol.billing import (
    MAX_TOPUP_MICROS,
    MIN_TOPUP_MICROS,
    TOPUP,
    TRANSACTION_TYPES,
    fee_percent,
    month_of,
)
from protocol.billing_api import (
    CreditAccount,
    CreditSettings,
    PaymentMethodInfo,
    Subscription,
    TopupRequest,
    TopupResult,
    TransactionItem,
    TransactionList,
)
from protocol.decoding import decode_json
from protocol.ids import new_id
from protocol.money import micros_to_usd, usd_to_micros
from protocol.scopes import BILLING_READ, BILLING_WRITE
from protocol.timefmt import from_datetime, now_us, to_iso
from storage.idempotency import COMPLETED, IN_PROGRESS
from storage.ledger import Account, Transaction
from storage.open import Storage

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
IDEMPOTENCY_TTL_US = 24 * 3600 * 1_000_000
_AUTH_ERRORS = (401, 403)


def _usd(micros: int | None) -> float | None:
    return None if micros is None else micros_to_usd(micros)


def account_body(account: Account) -> CreditAccount:
    return CreditAccount(
        balance_usd=micros_to_usd(account.balance_micros),
        lifetime_spend_usd=micros_to_usd(account.lifetime_spend_micros),
        auto_replenish=account.auto_replenish,
        replenish_amount_usd=_usd(account.replenish_amount_micros),
        replenish_threshold_usd=_usd(account.replenish_threshold_micros),
    )


def transaction_item(txn: Transaction) -> TransactionItem:
    return TransactionItem(
        id=txn.id,
        type=txn.type,
        amount_usd=micros_to_usd(txn.amount_micros),
        balance_after_usd=micros_to_usd(txn.balance_after_micros),
        description=txn.description,
        created_at=to_iso(txn.created_at) or "",
        model=txn.model,
        request_id=txn.request_id,
    )


def _query_time(name: str) -> int | None:
    """An ISO 8601 date (`2026-11-01`, midnight UTC) or date-time (naive = UTC)."""
    raw = request.args.get(name)
    if not raw:
        return None
    try:
        if "T" in raw or " " in raw:
            return from_datetime(datetime.fromisoformat(raw.replace("Z", "+00:00")))
        day = date.fromisoformat(raw)
        return from_datetime(datetime(day.year, day.month, day.day))
    except ValueError:
        raise errors.invalid_request(
            f"`{name}` must be an ISO 8601 date or date-time, e.g. 2026-11-01.", param=name
        ) from None


def _settings(body: CreditSettings, current: Account) -> dict[str, object]:
    """The columns to change; 400 when the result would be unusable (auto-replenish without
    an amount and a threshold, or an amount outside the top-up limits)."""
    changes: dict[str, object] = {}
    enabled = current.auto_replenish
    amount = current.replenish_amount_micros
    threshold = current.replenish_threshold_micros
    if not isinstance(body.auto_replenish, UnsetType):
        enabled = changes["auto_replenish"] = body.auto_replenish
    if not isinstance(body.replenish_amount_usd, UnsetType):
        amount = _micros_or_none(body.replenish_amount_usd)
        changes["replenish_amount_micros"] = amount
    if not isinstance(body.replenish_threshold_usd, UnsetType):
        threshold = _micros_or_none(body.replenish_threshold_usd)
        changes["replenish_threshold_micros"] = threshold
    if amount is not None and not MIN_TOPUP_MICROS <= amount <= MAX_TOPUP_MICROS:
        raise errors.invalid_request(
            "`replenish_amount_usd` must be between 5.00 and 100000.00.",
            param="replenish_amount_usd",
        )
    if enabled:
        for name, value in (
            ("replenish_amount_usd", amount),
            ("replenish_threshold_usd", threshold),
        ):
            if value is None:
                raise errors.invalid_request(
                    f"`auto_replenish` needs `{name}`.", param=name, code="missing_required_field"
                )
    return changes


def _micros_or_none(usd: float | None) -> int | None:
    return None if usd is None else usd_to_micros(usd)


def routes(
    storage: Storage, auth: Authenticator, accountant: Accountant, payments: PaymentProcessor
) -> Routes:
    r = Routes(Blueprint("credits", __name__))

    @r.operation(
        Operation(
            "GET",
            "/v1/credits",
            "The organization's credit account",
            "Billing",
            response=CreditAccount,
            scope=BILLING_READ,
            errors=_AUTH_ERRORS,
        )
    )
    async def get_credits() -> Response:
        principal = await authenticate(auth, BILLING_READ)
        account = await storage.ledger.account(principal.org_id)
        return json_response(account_body(_with_pending(account, accountant)))

    @r.operation(
        Operation(
            "PATCH",
            "/v1/credits",
            "Change the auto-replenish settings: only the fields sent change",
            "Billing",
            request=CreditSettings,
            response=CreditAccount,
            scope=BILLING_WRITE,
            errors=(400, *_AUTH_ERRORS, 413),
        )
    )
    async def update_credits() -> Response:
        principal = await authenticate(auth, BILLING_WRITE)
        body = decode_json(await _body(), CreditSettings)
        current = await storage.ledger.account(principal.org_id)
        account = await storage.ledger.update_settings(principal.org_id, _settings(body, current))
        accountant.refresh(principal.org_id)
        return json_response(account_body(_with_pending(account, accountant)))

    @r.operation(
        Operation(
            "POST",
            "/v1/credits/topup",
            "Add credit by charging a payment method (send `Idempotency-Key` to retry safely)",
            "Billing",
            request=TopupRequest,
            response=TopupResult,
            scope=BILLING_WRITE,
            errors=(400, *_AUTH_ERRORS, 402, 409, 413),
        )
    )
    async def topup() -> Response:
        principal = await authenticate(auth, BILLING_WRITE)
        raw = await _body()
        body = decode_json(raw, TopupRequest)
        micros = usd_to_micros(body.amount_usd)
        if micros < MIN_TOPUP_MICROS:
            raise errors.invalid_request(
                "The minimum top-up is 5.00 USD.", param="amount_usd", code="amount_too_small"
            )
        if micros > MAX_TOPUP_MICROS:
            raise errors.invalid_request(
                "The maximum top-up is 100000.00 USD.", param="amount_usd", code="amount_too_large"
            )
        method = _method(payments, principal.org_id, body.payment_method_id)
        key = request.headers.get("Idempotency-Key")
        if key is None:
            result = await _charge_and_credit(
                principal.org_id, method, micros, reference=_reference(principal.org_id, None)
            )
            return json_response(result)
        return await _idempotent_topup(principal.org_id, key, raw, method, micros)

    async def _idempotent_topup(
        org_id: str, key: str, raw: bytes, method: PaymentMethod, micros: int
    ) -> Response:
        if not 1 <= len(key) <= 255:
            raise errors.invalid_request(
                "`Idempotency-Key` must be 1 to 255 characters.", param="Idempotency-Key"
            )
        stored_key = "topup:" + key  # its own namespace beside chat's metadata keys
        fingerprint = hashlib.sha256(raw).hexdigest()
        claim = await storage.idempotency.claim(
            org_id, stored_key, fingerprint, now_us=now_us(), ttl_us=IDEMPOTENCY_TTL_US
        )
        if not claim.won:
            if not claim.same_request:
                raise errors.conflict(
                    "This Idempotency-Key was used with a different top-up; use a new key.",
                    param="Idempotency-Key",
                    code="idempotency_key_reused",
                )
            if claim.state == IN_PROGRESS or claim.response is None:
                raise errors.conflict(
                    "A top-up with this Idempotency-Key is still in progress.",
                    param="Idempotency-Key",
                    code="idempotency_in_progress",
                )
            replay = json_response(msgspec.json.decode(claim.response))
            replay.headers["Idempotent-Replayed"] = "true"
            return replay
        try:
            result = await _charge_and_credit(
                org_id, method, micros, reference=_reference(org_id, key)
            )
        except BaseException:
            await storage.idempotency.release(org_id, stored_key)
            raise
        await storage.idempotency.finish(
            org_id, stored_key, COMPLETED, msgspec.json.encode(result).decode()
        )
        return json_response(result)

    def _reference(org_id: str, key: str | None) -> str:
        """The processor's idempotency key: stable across retries that carry the same key."""
        return f"topup:{org_id}:{key or new_id('topup')}"

    async def _charge_and_credit(
        org_id: str, method: PaymentMethod, micros: int, *, reference: str
    ) -> TopupResult:
        try:
            await payments.charge(org_id, method, micros, reference)
        except PaymentDeclined as exc:
            raise errors.payment_required(
                f"The payment method was declined: {exc}",
                code="card_declined",
                param="payment_method_id",
            ) from None
        # Charged: from here the credit must land (a crash now needs the processor's records
        # to reconcile; docs/billing.md).
        description = f"Top-up ({method.brand} {method.last4})"
        txn = await accountant.credit(org_id, TOPUP, micros, description)
        return TopupResult(
            transaction_id=txn.id,
            amount_usd=micros_to_usd(micros),
            new_balance_usd=micros_to_usd(txn.balance_after_micros),
            created_at=to_iso(txn.created_at) or "",
        )

    @r.operation(
        Operation(
            "GET",
            "/v1/credits/transactions",
            "The ledger, newest first",
            "Billing",
            response=TransactionList,
            scope=BILLING_READ,
            errors=(400, *_AUTH_ERRORS),
            query=(
                ("limit", "integer", f"page size, default {DEFAULT_LIMIT}, max {MAX_LIMIT}"),
                ("offset", "integer", "transactions to skip, default 0"),
                ("type", "string", "topup, usage, refund or adjustment"),
                ("start_date", "string", "ISO 8601; transactions at or after it"),
                ("end_date", "string", "ISO 8601; transactions before it"),
            ),
        )
    )
    async def list_transactions() -> Response:
        principal = await authenticate(auth, BILLING_READ)
        limit = query_int("limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
        offset = query_int("offset", 0, minimum=0, maximum=2**31 - 1)
        kind = request.args.get("type") or None
        if kind is not None and kind not in TRANSACTION_TYPES:
            raise errors.invalid_request(
                f"`type` must be one of {', '.join(TRANSACTION_TYPES)}.", param="type"
            )
        start, end = _query_time("start_date"), _query_time("end_date")
        if start is not None and end is not None and end < start:
            raise errors.invalid_request("`end_date` is before `start_date`.", param="end_date")
        rows, total = await storage.ledger.list(
            principal.org_id, type=kind, start_us=start, end_us=end, limit=limit, offset=offset
        )
        return json_response(
            TransactionList(
                data=[transaction_item(t) for t in rows],
                total=total,
                has_more=offset + len(rows) < total,
            )
        )

    @r.operation(
        Operation(
            "GET",
            "/v1/billing/subscription",
            "The plan, its platform fee, the current period and its usage",
            "Billing",
            response=Subscription,
            scope=BILLING_READ,
            errors=_AUTH_ERRORS,
        )
    )
    async def subscription() -> Response:
        principal = await authenticate(auth, BILLING_READ)
        org = await storage.orgs.get(principal.org_id)
        plan = org.plan if org else "free"
        period = month_of(now_us())
        used = await storage.ledger.usage_between(principal.org_id, period.start_us, period.end_us)
        used += accountant.pending_micros(principal.org_id)
        method = payments.default_method(principal.org_id)
        return json_response(
            Subscription(
                plan=plan,
                platform_fee_percent=float(fee_percent(plan)),
                billing_period="monthly",
                current_period_start=to_iso(period.start_us) or "",
                current_period_end=to_iso(period.end_us) or "",
                usage_this_period_usd=micros_to_usd(used),
                payment_method=PaymentMethodInfo(
                    type=method.type, last4=method.last4, brand=method.brand
                ),
            )
        )

    return r


def _with_pending(account: Account, accountant: Accountant) -> Account:
    """Usage settled on this instance but not yet written is already spent."""
    pending = accountant.pending_micros(account.org_id)
    if not pending:
        return account
    return Account(
        org_id=account.org_id,
        balance_micros=account.balance_micros - pending,
        lifetime_spend_micros=account.lifetime_spend_micros + pending,
        auto_replenish=account.auto_replenish,
        replenish_amount_micros=account.replenish_amount_micros,
        replenish_threshold_micros=account.replenish_threshold_micros,
    )


def _method(payments: PaymentProcessor, org_id: str, method_id: str | None) -> PaymentMethod:
    if method_id is None:
        return payments.default_method(org_id)
    try:
        return payments.method(org_id, method_id)
    except UnknownPaymentMethod:
        raise errors.invalid_request(
            f"No payment method {method_id!r} for this organization.",
            param="payment_method_id",
            code="payment_method_not_found",
        ) from None


async def _body() -> bytes:
    body = await request.get_data(cache=False, as_text=False)
    assert isinstance(body, bytes)
    return body
