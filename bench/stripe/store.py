"""The simulated Stripe account: the state (ledger.py) with every call that changes it
(customers.py, payments.py, refunds.py). Each call runs to completion without awaiting, so a
request's effects are atomic; errors are raised as StripeFailure (errors.py). No I/O."""

from __future__ import annotations

from bench.stripe.customers import Customers
from bench.stripe.ledger import API_VERSION
from bench.stripe.params import AUTOMATIC, Form, Obj, Origin, new_id
from bench.stripe.payments import Payments
from bench.stripe.refunds import Refunds

__all__ = ["API_VERSION", "AUTOMATIC", "Account", "Form", "Obj", "Origin", "new_id"]


class Account(Customers, Payments, Refunds):
    """One Stripe account in test mode: its objects, events and every API call."""
