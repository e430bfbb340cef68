"""Stripe behind `[billing] payment_provider = "stripe"` (docs/billing.md): the processor
(top-ups, auto-replenish, refunds, payment methods) and what Stripe's objects mean to the
ledger (webhooks and the reconciler)."""
