"""Webhook delivery: the sender (one HTTPS attempt), a delivery actor per subscription, the
dispatcher that holds leases and runs them, and the janitor (docs/webhooks.md)."""
