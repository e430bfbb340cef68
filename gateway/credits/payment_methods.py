"""The organization's payment methods (docs/billing.md, "Payment methods"): list them, attach
one collected with a SetupIntent, make one the default (what top-ups without a
`payment_method_id` and auto-replenish charge), detach one. Reads need `billing:read`, changes
`billing:write`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.credits.topups import declined, unknown_method
from gateway.web import Operation, Request, Response, Routes, json_response
from protocol import errors
from protocol.billing_api import (
    AttachPaymentMethod,
    DeletedPaymentMethod,
    NoBody,
    PaymentMethodItem,
    PaymentMethodList,
    SetupIntentBody,
)
from protocol.decoding import decode_json
from protocol.errors import PaymentDeclined, PaymentUnavailable, UnknownPaymentMethod
from protocol.payments import PaymentMethod, PaymentProcessor
from protocol.scopes import BILLING_READ, BILLING_WRITE
from services.principal import Principal

_AUTH_ERRORS = (401, 403)
_METHOD_ID = re.compile(r"[A-Za-z0-9_]{1,255}")


@contextmanager
def processor_errors() -> Iterator[None]:
    """The processor's refusals as API errors: 400 not the org's method, 402 declined, 503 the
    processor unreachable."""
    try:
        yield
    except UnknownPaymentMethod as exc:
        raise unknown_method(str(exc)) from None
    except PaymentDeclined as exc:
        raise declined(exc) from None
    except PaymentUnavailable:
        raise unavailable() from None


def unavailable() -> errors.APIError:
    return errors.APIError(
        503,
        "The payment processor could not be reached; retry later.",
        type="server_error",
        code="payment_provider_unavailable",
        headers={"Retry-After": "5"},
    )


def item(method: PaymentMethod, default: PaymentMethod | None) -> PaymentMethodItem:
    return PaymentMethodItem(
        id=method.id,
        type=method.type,
        brand=method.brand,
        last4=method.last4,
        exp_month=method.exp_month,
        exp_year=method.exp_year,
        is_default=default is not None and default.id == method.id,
    )


def routes(payments: PaymentProcessor) -> Routes:
    r = Routes()

    @r.operation(
        Operation(
            "GET",
            "/v1/billing/payment_methods",
            "The organization's payment methods, the default first",
            "Billing",
            response=PaymentMethodList,
            scope=BILLING_READ,
            errors=(*_AUTH_ERRORS, 503),
        )
    )
    async def list_methods(request: Request) -> Response:
        org_id = _principal(request).org_id
        with processor_errors():
            default = await payments.default_method(org_id)
            methods = await payments.methods(org_id)
        return json_response(PaymentMethodList(data=[item(m, default) for m in methods]))

    @r.operation(
        Operation(
            "POST",
            "/v1/billing/payment_methods",
            "Attach a payment method (a SetupIntent's) to the organization",
            "Billing",
            request=AttachPaymentMethod,
            response=PaymentMethodItem,
            scope=BILLING_WRITE,
            errors=(400, *_AUTH_ERRORS, 402, 413, 503),
        )
    )
    async def attach(request: Request) -> Response:
        org_id = _principal(request).org_id
        body = await request.json(AttachPaymentMethod)
        with processor_errors():
            method = await payments.attach(org_id, body.payment_method_id)
            if body.default:
                await payments.set_default(org_id, method.id)
            default = await payments.default_method(org_id)
        return json_response(item(method, default))

    @r.operation(
        Operation(
            "POST",
            "/v1/billing/payment_methods/{payment_method_id}/default",
            "Make a payment method the organization's default",
            "Billing",
            request=NoBody,
            request_required=False,
            response=PaymentMethodItem,
            scope=BILLING_WRITE,
            errors=(400, *_AUTH_ERRORS, 404, 413, 503),
        )
    )
    async def make_default(request: Request) -> Response:
        org_id = _principal(request).org_id
        await _no_body(request)
        method_id = _method_id(request)
        with processor_errors(), _not_found(method_id):
            method = await payments.set_default(org_id, method_id)
        return json_response(item(method, method))

    @r.operation(
        Operation(
            "DELETE",
            "/v1/billing/payment_methods/{payment_method_id}",
            "Detach a payment method from the organization",
            "Billing",
            response=DeletedPaymentMethod,
            scope=BILLING_WRITE,
            errors=(*_AUTH_ERRORS, 404, 503),
        )
    )
    async def detach(request: Request) -> Response:
        org_id = _principal(request).org_id
        method_id = _method_id(request)
        with processor_errors(), _not_found(method_id):
            await payments.detach(org_id, method_id)
        return json_response(DeletedPaymentMethod(id=method_id))

    @r.operation(
        Operation(
            "POST",
            "/v1/billing/setup_intents",
            "Start collecting a card: a SetupIntent whose client_secret Stripe.js confirms",
            "Billing",
            request=NoBody,
            request_required=False,
            response=SetupIntentBody,
            scope=BILLING_WRITE,
            errors=(400, *_AUTH_ERRORS, 413, 503),
        )
    )
    async def setup_intent(request: Request) -> Response:
        org_id = _principal(request).org_id
        await _no_body(request)
        with processor_errors():
            made = await payments.setup_intent(org_id)
        return json_response(SetupIntentBody(id=made.id, client_secret=made.client_secret))

    return r


async def _no_body(request: Request) -> None:
    raw = await request.body()
    if raw.strip():
        decode_json(raw, NoBody)


def _method_id(request: Request) -> str:
    method_id = request.path_params["payment_method_id"]
    if not _METHOD_ID.fullmatch(method_id):
        raise _no_such(method_id)
    return method_id


@contextmanager
def _not_found(method_id: str) -> Iterator[None]:
    """On a path, a method that is not the org's is 404 (in a body it is 400)."""
    try:
        yield
    except UnknownPaymentMethod:
        raise _no_such(method_id) from None


def _no_such(method_id: str) -> errors.APIError:
    return errors.not_found(
        f"No payment method {method_id[:64]!r} for this organization.",
        param="payment_method_id",
        code="payment_method_not_found",
    )


def _principal(request: Request) -> Principal:
    assert request.principal is not None
    return request.principal
