"""Credits and billing: the account, its settings, top-ups, the transaction list and the
subscription. Reads need `billing:read`, changes `billing:write` (management keys hold both)."""

from __future__ import annotations

from msgspec import UnsetType

from actors.accountant import Accountant
from gateway.credits.payment_methods import processor_errors
from gateway.credits.topups import check_amount, top_up, unknown_method
from gateway.web import Operation, Request, Response, Routes, json_response
from protocol import errors
from protocol.billing import (
    MAX_TOPUP_MICROS,
    MIN_TOPUP_MICROS,
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
from protocol.money import format_usd, micros_to_usd, usd_to_micros
from protocol.scopes import BILLING_READ, BILLING_WRITE
from protocol.timefmt import now_us, to_iso
from services.payments import (
    PaymentMethod,
    PaymentProcessor,
    UnknownPaymentMethod,
)
from services.principal import Principal
from storage.ledger import Account, Transaction
from storage.open import Storage

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
_AUTH_ERRORS = (401, 403)


def _usd(micros: int | None) -> float:
    """A setting in USD; 0.0 when not set (the API types it float, never null)."""
    return 0.0 if micros is None else micros_to_usd(micros)


def account_body(account: Account) -> CreditAccount:
    return CreditAccount(
        balance_usd=micros_to_usd(account.balance_micros),
        lifetime_spend_usd=micros_to_usd(account.lifetime_spend_micros),
        auto_replenish=account.auto_replenish,
        replenish_amount_usd=_usd(account.replenish_amount_micros),
        replenish_threshold_usd=_usd(account.replenish_threshold_micros),
        auto_replenish_failure=None if account.auto_replenish else account.replenish_failure,
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


def _settings(body: CreditSettings, current: Account) -> dict[str, object]:
    """The columns to change; 400 when the result would be unusable (auto-replenish without
    an amount and a threshold, an amount outside the top-up limits, or a threshold at or above
    the amount: one top-up could not lift the balance above it)."""
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
        assert amount is not None and threshold is not None
        if threshold >= amount:  # one top-up lifts a balance of 0 or more above it
            raise errors.invalid_request(
                f"`replenish_threshold_usd` ({format_usd(threshold)}) must be below"
                f" `replenish_amount_usd` ({format_usd(amount)}), so that one top-up"
                " lifts the balance above the threshold.",
                param="replenish_threshold_usd",
            )
    return changes


def _micros_or_none(usd: float | None) -> int | None:
    """0 and null both clear a setting: GET shows an unset one as 0.0, so 0 round-trips."""
    micros = None if usd is None else usd_to_micros(usd)
    return micros or None


def routes(storage: Storage, accountant: Accountant, payments: PaymentProcessor) -> Routes:
    r = Routes()

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
    async def get_credits(request: Request) -> Response:
        principal = _principal(request)
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
    async def update_credits(request: Request) -> Response:
        principal = _principal(request)
        body = await request.json(CreditSettings)
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
            errors=(400, *_AUTH_ERRORS, 402, 409, 413, 503),
        )
    )
    async def topup(request: Request) -> Response:
        principal = _principal(request)
        raw = await request.body()
        body = decode_json(raw, TopupRequest)
        check_amount(usd_to_micros(body.amount_usd))  # before asking the processor anything
        with processor_errors():
            method = await _method(payments, principal.org_id, body.payment_method_id)
        outcome = await top_up(
            storage,
            accountant,
            payments,
            org_id=principal.org_id,
            method=method,
            micros=usd_to_micros(body.amount_usd),
            key=request.header(b"idempotency-key"),
            body=raw,
        )
        replayed = [(b"idempotent-replayed", b"true")] if outcome.replayed else None
        return json_response(outcome.result, headers=replayed)

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
    async def list_transactions(request: Request) -> Response:
        principal = _principal(request)
        limit = request.query_int("limit", DEFAULT_LIMIT, minimum=1, maximum=MAX_LIMIT)
        offset = request.query_int("offset", 0, minimum=0, maximum=2**31 - 1)
        kind = request.query.get("type") or None
        if kind is not None and kind not in TRANSACTION_TYPES:
            raise errors.invalid_request(
                f"`type` must be one of {', '.join(TRANSACTION_TYPES)}.", param="type"
            )
        start, end = request.query_time("start_date"), request.query_time("end_date")
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
            errors=(*_AUTH_ERRORS, 503),
        )
    )
    async def subscription(request: Request) -> Response:
        principal = _principal(request)
        org = await storage.orgs.get(principal.org_id)
        plan = org.plan if org else "free"
        period = month_of(now_us())
        used = await storage.ledger.usage_between(principal.org_id, period.start_us, period.end_us)
        used += accountant.pending_micros(principal.org_id)
        with processor_errors():
            method = await payments.default_method(principal.org_id)
        return json_response(
            Subscription(
                plan=plan,
                platform_fee_percent=float(fee_percent(plan)),
                billing_period="monthly",
                current_period_start=to_iso(period.start_us) or "",
                current_period_end=to_iso(period.end_us) or "",
                usage_this_period_usd=micros_to_usd(used),
                payment_method=None
                if method is None
                else PaymentMethodInfo(type=method.type, last4=method.last4, brand=method.brand),
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
        replenish_failure=account.replenish_failure,
    )


async def _method(payments: PaymentProcessor, org_id: str, method_id: str | None) -> PaymentMethod:
    """The chosen method (400 when it is not the org's), else the default (400 when there is
    none)."""
    if method_id is not None:
        try:
            return await payments.method(org_id, method_id)
        except UnknownPaymentMethod:
            raise unknown_method(method_id) from None
    method = await payments.default_method(org_id)
    if method is None:
        raise errors.invalid_request(
            "The organization has no default payment method: attach one"
            " (POST /v1/billing/payment_methods) or send `payment_method_id`.",
            param="payment_method_id",
            code="payment_method_required",
        )
    return method


def _principal(request: Request) -> Principal:
    assert request.principal is not None
    return request.principal
