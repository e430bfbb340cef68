"""The credits area: the account, top-ups, transactions, the subscription, payment methods and
Stripe's webhook; with Stripe, the reconciler (actors/payment_reconciler.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.payment_reconciler import PaymentReconciler
from gateway.area import Area
from gateway.core import Core
from gateway.credits import payment_methods, stripe_webhook
from gateway.credits.routes import routes

if TYPE_CHECKING:
    from services.stripe.events import StripeEvents
    from services.stripe.processor import StripeProcessor


async def open_credits(core: Core) -> Area:
    billing = core.config.billing
    processor: StripeProcessor | None = None
    events: StripeEvents | None = None
    if billing.payment_provider == "stripe":  # the SDK (~30 MB) is imported only then
        from services.stripe.events import StripeEvents
        from services.stripe.processor import StripeProcessor

        assert isinstance(core.payments, StripeProcessor)
        processor = core.payments
        events = StripeEvents(
            core.storage, processor, core.accountant.credit, core.accountant.refresh
        )
        await core.supervisor.start(
            PaymentReconciler(
                processor,
                core.storage.ledger,
                events.reconcile,
                interval_s=billing.reconcile_interval_s,
                window_s=billing.reconcile_window_s,
            )
        )
    r = routes(core.storage, core.accountant, core.payments)
    r.routes += payment_methods.routes(core.payments).routes
    r.routes += stripe_webhook.routes(events, processor, billing.stripe_webhook_secret or "").routes
    return Area(routes=r)
