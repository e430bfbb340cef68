"""The payment processor of the instance, from `[billing] payment_provider` (docs/billing.md):
opened with the runtime's resources and closed after every actor stopped.

The test processor takes no money. With billing on, the instance says so at start, as a
warning every operator sees; with GATEWAY_ENV = production the config refuses it
(gateway/config/loader.py)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from gateway.config import Config
from protocol.payments import PaymentProcessor
from services.payments import TestPaymentProcessor
from storage.open import Storage

log = logging.getLogger("gateway.billing")

TEST_PROCESSOR_WARNING = (
    'billing uses payment_provider = "test": top-ups are NOT charged, every top-up adds credit'
    ' for free. Set [billing] payment_provider = "stripe" (docs/billing.md) before selling'
    " credit; GATEWAY_ENV=production refuses this configuration."
)


@asynccontextmanager
async def open_processor(config: Config, storage: Storage) -> AsyncIterator[PaymentProcessor]:
    billing = config.billing
    if billing.payment_provider != "stripe":
        if billing.enabled:
            log.warning(TEST_PROCESSOR_WARNING)
        yield TestPaymentProcessor()
        return
    from services.stripe.processor import StripeProcessor  # the SDK: only when it is used

    assert billing.stripe_secret_key is not None  # the loader requires it
    stripe = StripeProcessor(
        billing.stripe_secret_key, storage.payments, api_base=billing.stripe_api_base
    )
    try:
        yield stripe
    finally:
        with trio.CancelScope(shield=True):
            await stripe.aclose()
