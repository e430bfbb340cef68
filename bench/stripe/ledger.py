"""The simulated Stripe account's state: its objects in memory (the JSON dicts Stripe answers
with), lookups that fail as Stripe does, and events. An event carries a deep copy of its object
at the moment it happened and is handed to `on_event` (the webhook sender). The calls that
change the state are in customers.py, payments.py and refunds.py; store.py joins them. No I/O.
"""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Callable

from bench.stripe import errors
from bench.stripe.cards import TOKENS, Card
from bench.stripe.params import Form, Obj, Origin, new_id

API_VERSION = "2026-10-28.endive"  # the pinned SDK's (stripe/_api_version.py)

__all__ = ["API_VERSION", "Form", "Ledger", "Obj", "Origin"]


class Ledger:
    """One Stripe account in test mode. `now` gives `created` and webhook timestamps."""

    def __init__(
        self,
        on_event: Callable[[Obj], None] = lambda event: None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.customers: dict[str, Obj] = {}
        self.payment_methods: dict[str, Obj] = {}
        self.payment_intents: dict[str, Obj] = {}
        self.charges: dict[str, Obj] = {}
        self.refunds: dict[str, Obj] = {}
        self.disputes: dict[str, Obj] = {}
        self.setup_intents: dict[str, Obj] = {}
        self.events: list[Obj] = []
        self.cards: dict[str, Card] = {}  # pm id -> the card it was made from
        self.on_event = on_event
        self.now = now
        self.pending_webhooks = 0  # what events say in `pending_webhooks` (1 with a URL)

    def _created(self) -> int:
        return int(self.now())

    def emit(self, kind: str, obj: Obj, origin: Origin) -> Obj:
        event = {
            "id": new_id("evt"),
            "object": "event",
            "api_version": API_VERSION,
            "created": self._created(),
            "data": {"object": copy.deepcopy(obj)},
            "livemode": False,
            "pending_webhooks": self.pending_webhooks,
            "request": {"id": origin.request_id, "idempotency_key": origin.idempotency_key},
            "type": kind,
        }
        self.events.append(event)
        self.on_event(event)
        return event

    # --- customers --------------------------------------------------------------------------

    def customer(self, customer_id: str, param: str | None = None) -> Obj:
        found = self.customers.get(customer_id)
        if found is None:
            raise errors.missing("customer", customer_id, param)
        return found

    def _clone(self, token: str) -> Obj:
        card = TOKENS[token]
        pm: Obj = {
            "id": new_id("pm"),
            "object": "payment_method",
            "allow_redisplay": "unspecified",
            "billing_details": {
                "address": {
                    "city": None,
                    "country": None,
                    "line1": None,
                    "line2": None,
                    "postal_code": None,
                    "state": None,
                },
                "email": None,
                "name": None,
                "phone": None,
            },
            "card": {
                "brand": card.brand,
                "checks": {
                    "address_line1_check": None,
                    "address_postal_code_check": None,
                    "cvc_check": None,
                },
                "country": "US",
                "display_brand": card.brand,
                "exp_month": card.exp_month,
                "exp_year": card.exp_year,
                "fingerprint": secrets.token_urlsafe(12),
                "funding": card.funding,
                "last4": card.last4,
                "networks": {"available": [card.brand], "preferred": None},
                "wallet": None,
            },
            "created": self._created(),
            "customer": None,
            "livemode": False,
            "metadata": {},
            "type": "card",
        }
        self.payment_methods[pm["id"]] = pm
        self.cards[pm["id"]] = card
        return pm

    def payment_method(self, pm_id: str, param: str | None = None) -> Obj:
        """An existing pm_, or a fresh unattached clone of a token."""
        if pm_id in TOKENS:
            return self._clone(pm_id)
        found = self.payment_methods.get(pm_id)
        if found is None:
            raise errors.missing("PaymentMethod", pm_id, param)
        return found

    def payment_intent(self, pi_id: str, param: str | None = None) -> Obj:
        found = self.payment_intents.get(pi_id)
        if found is None:
            raise errors.missing("payment_intent", pi_id, param)
        return found

    def charge(self, charge_id: str, param: str | None = None) -> Obj:
        found = self.charges.get(charge_id)
        if found is None:
            raise errors.missing("charge", charge_id, param)
        return found

    def refund(self, refund_id: str) -> Obj:
        found = self.refunds.get(refund_id)
        if found is None:
            raise errors.missing("refund", refund_id)
        return found

    def setup_intent(self, seti_id: str) -> Obj:
        found = self.setup_intents.get(seti_id)
        if found is None:
            raise errors.missing("setup_intent", seti_id)
        return found
