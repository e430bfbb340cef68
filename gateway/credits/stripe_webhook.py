"""POST /v1/billing/stripe/webhook: Stripe's events (docs/billing.md, "Stripe webhooks").

No credential: an event is believed only when the SDK verifies its `Stripe-Signature` with
STRIPE_WEBHOOK_SECRET and its timestamp is at most 300 s old; anything else is 400 and changes
nothing. A verified event is applied once (services/stripe/events.py); 2xx tells Stripe to stop
delivering it, 503 (Stripe unreachable while the event needs it, or the database) to deliver
it again later.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.credits.payment_methods import unavailable
from gateway.web import Auth, Operation, Request, Response, Routes, json_response
from protocol import errors
from protocol.billing_api import StripeEvent, WebhookAck
from protocol.errors import PaymentUnavailable
from services.stripe.objects import SignatureRejected

if TYPE_CHECKING:  # the SDK is imported only when Stripe is the processor
    from services.stripe.events import StripeEvents
    from services.stripe.processor import StripeProcessor

log = logging.getLogger("gateway.billing")

PATH = "/v1/billing/stripe/webhook"


def routes(
    stripe_events: StripeEvents | None, processor: StripeProcessor | None, secret: str
) -> Routes:
    r = Routes()

    @r.operation(
        Operation(
            "POST",
            PATH,
            "Stripe's events, signed with the endpoint's secret (no credential)",
            "Billing",
            request=StripeEvent,
            response=WebhookAck,
            auth=Auth.NONE,
            errors=(400, 404, 413, 503),
        )
    )
    async def stripe_webhook(request: Request) -> Response:
        payload = await request.body()
        try:
            payload.decode()
        except UnicodeDecodeError:  # as on every JSON route
            raise errors.invalid_request(
                "The body is not valid UTF-8.", code="invalid_json"
            ) from None
        if stripe_events is None or processor is None:
            raise errors.not_found(
                "This gateway's payment provider is not Stripe ([billing] payment_provider)."
            )
        signature = request.header(b"stripe-signature")
        try:
            event = processor.verify_event(payload, signature, secret)
        except SignatureRejected as exc:
            log.warning("refused a Stripe webhook: %s", exc)
            raise errors.invalid_request(
                "The Stripe-Signature header does not verify (forged, for another endpoint's"
                " secret, or older than 300 s).",
                param="Stripe-Signature",
                code="invalid_signature",
            ) from None
        except ValueError:
            raise errors.invalid_request(
                "The body is not a JSON event.", code="invalid_json"
            ) from None
        try:
            outcome = await stripe_events.handle(event)
        except PaymentUnavailable:
            raise unavailable() from None
        log.info("Stripe event %s (%s): %s", event.get("id"), event.get("type"), outcome)
        return json_response(WebhookAck(duplicate=outcome == "duplicate"))

    return r
