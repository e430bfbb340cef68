"""A simulated Stripe: the subset of Stripe's REST API the gateway's `payment_provider =
"stripe"` uses, over real HTTP/1.1 on loopback, with signed webhooks.

Tests point the official SDK at it (`StripeClient(key, base_addresses={"api": sim.url})`) and
drive what happens outside the API (3-D Secure, dashboard refunds, disputes, outages) through the
`StripeSim` handle. Layers: `forms` (Stripe's form encoding, read back), `cards` (test tokens),
`errors` (error shapes), `params` (reading parameters), `ledger` (objects, events) with
`customers`, `payments` and `refunds` (what each call does) joined in `store`, `routes` (paths,
lists, expand), `webhooks` (signing, delivery with retries), `sim` (the handle: auth,
idempotency), `control` (`/_sim/...`), `server` (sockets, outages), `cli`
(`python -m bench.stripe`).
"""

from bench.stripe.server import running_stripe_sim, serve_stripe
from bench.stripe.sim import LoggedRequest, StripeSim
from bench.stripe.webhooks import Delivery, sign

__all__ = ["Delivery", "LoggedRequest", "StripeSim", "running_stripe_sim", "serve_stripe", "sign"]
