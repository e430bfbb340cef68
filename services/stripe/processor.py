"""Stripe as the payment processor (protocol/payments.py), through the official SDK's async
client on Trio (`stripe.HTTPXClient`: httpx with anyio, which runs on Trio; measured against
the sync client in worker threads in docs/decisions.md).

- **A Customer per organization**, made on first use and kept (storage/payments.py); its
  payment methods are the org's, its `invoice_settings.default_payment_method` the default.
- **A top-up is a PaymentIntent** confirmed at once with the card (`off_session` for
  auto-replenish), in USD cents, with an idempotency key derived from the top-up's reference,
  so a retried request (ours, or the SDK's own retry after a lost answer) finds the same
  PaymentIntent instead of charging twice. Its metadata carries the org, the reference, the kind
  and the card, so whoever credits it (the request, the webhook, the reconciler) writes the
  same row: its id comes from the PaymentIntent's id (`credit_id`).
- **Errors**: a decline is PaymentDeclined with Stripe's decline code; 3-D Secure is
  PaymentRequiresAction; a payment method that is not the org's is UnknownPaymentMethod
  (whoever's it is); anything else (unreachable, 5xx, rate limit, a bad key) is
  PaymentUnavailable, logged, and never credited here: if Stripe did charge, the reconciler
  credits it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import httpx
import stripe
import trio

from protocol.errors import (
    APIError,
    PaymentDeclined,
    PaymentRequiresAction,
    PaymentUnavailable,
    UnknownPaymentMethod,
)
from protocol.payments import (
    MICROS_PER_CENT,
    TOPUP_KIND,
    Payment,
    PaymentMethod,
    Refund,
    SetupIntent,
)
from services.stripe.objects import SUCCEEDED, GatewayPayment, SignatureRejected, gateway_payment
from storage.payments import PaymentRecords

if TYPE_CHECKING:  # stripe.params is ~20 MB of TypedDicts: for the type checker only
    from stripe.params import (
        PaymentIntentCreateParams,
        PaymentIntentListParams,
        RefundCreateParams,
    )

log = logging.getLogger(__name__)

PROVIDER = "stripe"
TIMEOUT_S = 20.0  # one Stripe call, the SDK's retries included (it waits between them)
NETWORK_RETRIES = 2  # the SDK retries a lost connection with the same idempotency key
PAGE = 100
TEST_TOKEN_PREFIX = "pm_card_"  # Stripe's test payment methods (test mode only)
_T = TypeVar("_T")


def stripe_key(reference: str) -> str:
    """Stripe's idempotency key for a reference (ours are longer than Stripe allows)."""
    return "gw-" + hashlib.sha256(reference.encode()).hexdigest()


def cents(micros: int) -> int:
    if micros % MICROS_PER_CENT:
        raise ValueError(f"{micros} micro-USD is not a whole number of cents")
    return micros // MICROS_PER_CENT


class _OneChunk(httpx.AsyncByteStream):
    """A request body sent as one chunk by a plain iterator. httpx's own (`content=`) is an
    async generator: a send cut short (Stripe reset the connection, a deadline) leaves it
    unfinished, and Trio reports it when it is garbage collected."""

    def __init__(self, body: bytes) -> None:
        self._body: bytes | None = body

    def __aiter__(self) -> _OneChunk:
        return self

    async def __anext__(self) -> bytes:
        if self._body is None:
            raise StopAsyncIteration
        body, self._body = self._body, None
        return body


class _HTTPXClient(stripe.HTTPXClient):
    """The SDK's httpx client sending its form as one chunk (above); stripe 16.1 also passes it
    as `data=<str>`, which httpx 0.28 deprecates with a warning on every call."""

    async def request_async(  # type: ignore[no-untyped-def]
        self, method: str, url: str, headers: Mapping[str, str], post_data=None
    ) -> tuple[bytes, int, Mapping[str, str]]:
        body = (post_data or "").encode() if isinstance(post_data, str) else post_data or b""
        request = self._client_async.build_request(
            method, url, headers=headers, content=body, timeout=self._timeout
        )
        request.stream = _OneChunk(body)
        try:
            response = await self._client_async.send(request)
        except Exception as e:
            self._handle_request_error(e)
        return response.content, response.status_code, response.headers


class StripeProcessor:
    name = PROVIDER
    reconciles = True

    def __init__(
        self, secret_key: str, records: PaymentRecords, *, api_base: str | None = None
    ) -> None:
        self._records = records
        self._http = _HTTPXClient(timeout=TIMEOUT_S)
        self._client = stripe.StripeClient(
            secret_key,
            base_addresses={"api": api_base} if api_base else None,
            http_client=self._http,
            max_network_retries=NETWORK_RETRIES,
        )
        self._v1 = self._client.v1
        self._making: dict[str, trio.Lock] = {}  # org -> lock while its Customer is made

    def __repr__(self) -> str:
        return "<StripeProcessor>"  # never the key

    async def aclose(self) -> None:
        await self._http.close_async()  # type: ignore[no-untyped-call]

    # -- customers and payment methods ----------------------------------------------------

    async def customer(self, org_id: str) -> str:
        """The org's Customer id, made on first use (once per org across instances: the
        idempotency key is the org's, and the first one recorded stays)."""
        known = await self._records.customer(org_id, PROVIDER)
        if known is not None:
            return known
        lock = self._making.setdefault(org_id, trio.Lock())
        try:
            async with lock:
                known = await self._records.customer(org_id, PROVIDER)
                if known is not None:
                    return known
                made = await _call(
                    self._v1.customers.create_async(
                        {"metadata": {"org_id": org_id}, "description": f"gateway org {org_id}"},
                        {"idempotency_key": stripe_key(f"customer:{org_id}")},
                    )
                )
                return await self._records.keep_customer(org_id, PROVIDER, made["id"])
        finally:
            if not lock.statistics().tasks_waiting:
                self._making.pop(org_id, None)

    async def default_method(self, org_id: str) -> PaymentMethod | None:
        customer = await self._records.customer(org_id, PROVIDER)
        if customer is None:
            return None  # reading makes no Customer
        found = await _call(
            self._v1.customers.retrieve_async(
                customer, {"expand": ["invoice_settings.default_payment_method"]}
            )
        )
        method = (found.get("invoice_settings") or {}).get("default_payment_method")
        return _method(method) if isinstance(method, Mapping) else None

    async def method(self, org_id: str, method_id: str) -> PaymentMethod:
        """One of the org's methods, or one of Stripe's test tokens (`pm_card_visa`: they work
        in test mode only). A card attached to nobody is refused, though Stripe would charge
        it: its id alone would let whoever learnt it pay with someone else's card. Attach it
        first (a SetupIntent does)."""
        found = await self._retrieve_method(method_id)
        owner = found.get("customer")
        if owner is None and method_id.startswith(TEST_TOKEN_PREFIX):
            return _method(found)
        if owner is None or owner != await self.customer(org_id):
            raise UnknownPaymentMethod(method_id)
        return _method(found)

    async def methods(self, org_id: str) -> list[PaymentMethod]:
        customer = await self._records.customer(org_id, PROVIDER)
        if customer is None:
            return []
        default = await self.default_method(org_id)
        page = await _call(
            self._v1.customers.payment_methods.list_async(customer, {"type": "card", "limit": PAGE})
        )
        listed = [_method(m) for m in page.get("data", ())]
        if default is None:
            return listed
        return [default, *(m for m in listed if m.id != default.id)]

    async def attach(self, org_id: str, method_id: str) -> PaymentMethod:
        customer = await self.customer(org_id)
        found = await self._retrieve_method(method_id)
        if found.get("customer") == customer:
            return _method(found)  # a SetupIntent attached it already
        if found.get("customer") is not None:
            raise UnknownPaymentMethod(method_id)
        attached = await _call(
            self._v1.payment_methods.attach_async(method_id, {"customer": customer}),
            method_id=method_id,
        )
        return _method(attached)

    async def set_default(self, org_id: str, method_id: str) -> PaymentMethod:
        method = await self._own_method(org_id, method_id)
        customer = await self.customer(org_id)
        await _call(
            self._v1.customers.update_async(
                customer, {"invoice_settings": {"default_payment_method": method.id}}
            )
        )
        return method

    async def detach(self, org_id: str, method_id: str) -> None:
        await self._own_method(org_id, method_id)
        await _call(self._v1.payment_methods.detach_async(method_id), method_id=method_id)

    async def setup_intent(self, org_id: str) -> SetupIntent:
        customer = await self.customer(org_id)
        made = await _call(
            self._v1.setup_intents.create_async(
                {
                    "customer": customer,
                    "usage": "off_session",
                    "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
                }
            )
        )
        return SetupIntent(made["id"], made["client_secret"])

    async def _own_method(self, org_id: str, method_id: str) -> PaymentMethod:
        found = await self._retrieve_method(method_id)
        if found.get("customer") != await self.customer(org_id):
            raise UnknownPaymentMethod(method_id)
        return _method(found)

    async def _retrieve_method(self, method_id: str) -> dict[str, Any]:
        return await _call(self._v1.payment_methods.retrieve_async(method_id), method_id=method_id)

    # -- charges and refunds ---------------------------------------------------------------

    async def charge(
        self,
        org_id: str,
        method: PaymentMethod,
        micros: int,
        reference: str,
        *,
        kind: str = TOPUP_KIND,
        off_session: bool = False,
    ) -> Payment:
        customer = await self.customer(org_id)
        params: PaymentIntentCreateParams = {
            "amount": cents(micros),
            "currency": "usd",
            "customer": customer,
            "payment_method": method.id,
            # Cards only, confirmed here: no redirect-based method (it would need a return_url).
            "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
            "confirm": True,
            "off_session": off_session,
            "description": f"{'Auto top-up' if off_session else 'Top-up'} of org {org_id}",
            "metadata": {
                "org_id": org_id,
                "reference": reference,
                "kind": kind,
                "card": method.label,
            },
        }
        pi = await _call(
            self._v1.payment_intents.create_async(
                params, {"idempotency_key": stripe_key(reference)}
            ),
            method_id=method.id,
        )
        if pi.get("status") != SUCCEEDED:
            # A replayed answer (same idempotency key) is the first one, as it was then: the
            # customer may have finished 3-D Secure since.
            pi = await _call(self._v1.payment_intents.retrieve_async(pi["id"]))
        return _settled(pi)

    async def refund(self, org_id: str, reference: str) -> None:
        raise AssertionError("Stripe reconciles: a charge is credited, never refunded to undo")

    async def refund_payment(self, payment_id: str, micros: int | None, key: str) -> Refund:
        params: RefundCreateParams = {
            "payment_intent": payment_id,
            "reason": "requested_by_customer",
        }
        if micros is not None:
            params["amount"] = cents(micros)
        made = await _call(
            self._v1.refunds.create_async(params, {"idempotency_key": stripe_key(key)})
        )
        return Refund(made["id"], payment_id, int(made["amount"]) * MICROS_PER_CENT)

    async def refunds_of(self, charge: str) -> list[Refund]:
        """Every refund of a charge that Stripe made or is making (not failed or canceled)."""
        page = await _call(self._v1.refunds.list_async({"charge": charge, "limit": PAGE}))
        out = []
        for r in page.get("data", ()):
            if r.get("status") in ("succeeded", "pending") and isinstance(r.get("amount"), int):
                pi = r.get("payment_intent")
                out.append(
                    Refund(
                        r["id"], pi if isinstance(pi, str) else "", r["amount"] * MICROS_PER_CENT
                    )
                )
        return out

    async def payment(self, payment_id: str) -> GatewayPayment | None:
        return gateway_payment(await _call(self._v1.payment_intents.retrieve_async(payment_id)))

    async def succeeded_since(self, since_unix: int) -> AsyncIterator[GatewayPayment]:
        """The gateway's PaymentIntents created since then that succeeded, newest first."""
        after: str | None = None
        while True:
            params: PaymentIntentListParams = {"created": {"gte": since_unix}, "limit": PAGE}
            if after is not None:
                params["starting_after"] = after
            page = await _call(self._v1.payment_intents.list_async(params))
            data = page.get("data") or []
            for pi in data:
                found = gateway_payment(pi)
                if found is not None and found.status == SUCCEEDED:
                    yield found
            if not page.get("has_more") or not data:
                return
            after = data[-1]["id"]

    def verify_event(self, payload: bytes, signature: str | None, secret: str) -> dict[str, Any]:
        """The event, when Stripe signed it within the last 300 s. Raises SignatureRejected
        (forged, stale, missing) or ValueError (not JSON)."""
        try:
            stripe.WebhookSignature.verify_header(payload, signature, secret, tolerance=300)
        except stripe.SignatureVerificationError as exc:
            raise SignatureRejected(str(exc.user_message or exc)) from None
        try:
            event = json.loads(payload)  # ValueError: not JSON (UnicodeDecodeError is one)
        except RecursionError:  # nested thousands deep
            raise ValueError("the event is nested too deep") from None
        if not isinstance(event, dict):
            raise ValueError("an event is a JSON object")
        return event


def _method(found: Mapping[str, Any]) -> PaymentMethod:
    card = found.get("card") or {}
    return PaymentMethod(
        id=found["id"],
        type=str(found.get("type") or "card"),
        brand=str(card.get("brand") or "unknown"),
        last4=str(card.get("last4") or ""),
        exp_month=card.get("exp_month"),
        exp_year=card.get("exp_year"),
    )


def _settled(pi: Mapping[str, Any]) -> Payment:
    status = pi.get("status")
    if status == SUCCEEDED:
        return Payment(pi["id"], pi["id"], int(pi.get("amount_received") or 0) * MICROS_PER_CENT)
    if status in ("requires_action", "requires_confirmation", "processing"):
        raise PaymentRequiresAction(pi["id"], pi.get("client_secret"), str(status))
    error = pi.get("last_payment_error") or {}
    decline = error.get("decline_code")
    raise PaymentDeclined(
        str(error.get("message") or f"The payment is {status}."),
        str(error.get("code") or "card_declined"),
        str(decline) if decline else None,
    )


async def _call(request: Awaitable[_T], *, method_id: str | None = None) -> dict[str, Any]:
    """Await one SDK call (bounded: the SDK's own timeout, then ours) and answer the object as
    a plain dict; Stripe's errors become ours."""
    try:
        with trio.fail_after(TIMEOUT_S * (NETWORK_RETRIES + 2)):
            found = await request
    except stripe.StripeError as exc:
        _raise(exc, method_id)
    except trio.TooSlowError:
        raise PaymentUnavailable("Stripe did not answer in time.") from None
    as_dict: dict[str, Any] = found.to_dict() if isinstance(found, stripe.StripeObject) else {}
    return as_dict


def _raise(exc: stripe.StripeError, method_id: str | None) -> NoReturn:
    body = exc.json_body if isinstance(exc.json_body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    assert isinstance(error, dict)
    message = str(error.get("message") or exc.user_message or "Stripe refused the request.")
    if isinstance(exc, stripe.CardError):
        decline = error.get("decline_code")
        raise PaymentDeclined(
            message, str(exc.code or "card_declined"), str(decline) if decline else None
        ) from None
    if isinstance(exc, stripe.IdempotencyError):
        raise APIError(
            409,
            "This Idempotency-Key was used for a payment with other details (card or amount).",
            type="conflict_error",
            code="idempotency_key_reused",
        ) from None
    if isinstance(exc, stripe.InvalidRequestError):
        param = str(error.get("param") or exc.param or "")
        if method_id is not None and (
            exc.code == "resource_missing" or "payment_method" in param or not param
        ):
            raise UnknownPaymentMethod(method_id) from None
        if exc.code == "charge_already_refunded" or param == "amount":
            raise PaymentDeclined(message, str(exc.code or "amount_too_large")) from None
        log.error("Stripe refused a request of the gateway: %s (%s)", message, exc.code)
        raise PaymentUnavailable(f"Stripe refused the request: {message}") from None
    if isinstance(exc, stripe.AuthenticationError | stripe.PermissionError):
        log.error("Stripe refused STRIPE_SECRET_KEY: %s", message)
    else:
        log.warning("Stripe is unavailable: %s: %s", type(exc).__name__, message)
    raise PaymentUnavailable("The payment processor could not be reached.") from None
