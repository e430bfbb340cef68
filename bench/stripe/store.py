"""The simulated Stripe account: its objects in memory and what each API call does to them.

Objects are the JSON dicts Stripe answers with (customers, payment methods, payment intents,
charges, refunds, disputes, setup intents) and events are appended to `events` with a deep copy
of their object at that moment, then handed to `on_event` (the webhook sender). Every method
runs to completion without awaiting, so a request's effects are atomic. Errors are raised as
StripeFailure (bench/stripe/errors.py). No I/O.
"""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.stripe import errors
from bench.stripe.cards import TOKENS, Behavior, Card
from bench.stripe.errors import StripeFailure

API_VERSION = "2026-10-28.endive"  # the pinned SDK's (stripe/_api_version.py)
MIN_AMOUNT = 50

Obj = dict[str, Any]
Form = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Origin:
    """Who caused an event: an API request (its id and idempotency key) or nobody (None)."""

    request_id: str | None = None
    idempotency_key: str | None = None


AUTOMATIC = Origin()


def new_id(prefix: str) -> str:
    return prefix + "_" + secrets.token_urlsafe(18).replace("-", "x").replace("_", "y")


def check_params(form: Form, allowed: set[str]) -> None:
    for name in form:
        if name not in allowed:
            raise errors.unknown_parameter(name)


def text(form: Form, name: str, *, required: bool = False) -> str | None:
    value = form.get(name)
    if value is None:
        if required:
            raise errors.missing_parameter(name)
        return None
    if not isinstance(value, str):
        raise errors.invalid(f"Invalid string: {name}", name)
    return value


def integer(form: Form, name: str, *, required: bool = False) -> int | None:
    value = text(form, name, required=required)
    if value is None:
        return None
    if not value.isascii() or not value.lstrip("-").isdigit() or len(value) > 18:
        raise errors.invalid(f"Invalid integer: {value[:50]}", name)
    return int(value)


def boolean(form: Form, name: str) -> bool:
    value = text(form, name)
    if value is None:
        return False
    if value not in ("true", "false"):
        raise errors.invalid(f"Invalid boolean: {value[:50]}", name)
    return value == "true"


def metadata_update(current: dict[str, str], form: Form) -> dict[str, str]:
    """Stripe's metadata semantics: keys merged, an empty value deletes its key, an empty
    `metadata=` clears all. At most 50 keys, keys up to 40 and values up to 500 characters."""
    value = form.get("metadata")
    if value is None:
        return current
    if value == "":
        return {}
    if not isinstance(value, dict):
        raise errors.invalid("Invalid hash", "metadata")
    merged = dict(current)
    for key, item in value.items():
        if not isinstance(item, str):
            raise errors.invalid("Invalid metadata value: must be a string", f"metadata[{key}]")
        if len(key) > 40 or len(item) > 500:
            raise errors.invalid("Metadata keys up to 40 and values up to 500 characters", key)
        if item == "":
            merged.pop(key, None)
        else:
            merged[key] = item
    if len(merged) > 50:
        raise errors.invalid("You can specify up to 50 keys in metadata", "metadata")
    return merged


class Account:
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

    def create_customer(self, form: Form, origin: Origin) -> Obj:
        check_params(
            form,
            {"email", "name", "description", "metadata", "payment_method", "invoice_settings"}
            | {"phone", "expand"},
        )
        customer: Obj = {
            "id": new_id("cus"),
            "object": "customer",
            "address": None,
            "balance": 0,
            "created": self._created(),
            "currency": None,
            "default_source": None,
            "delinquent": False,
            "description": text(form, "description"),
            "email": text(form, "email"),
            "invoice_prefix": secrets.token_hex(4).upper(),
            "invoice_settings": {
                "custom_fields": None,
                "default_payment_method": None,
                "footer": None,
                "rendering_options": None,
            },
            "livemode": False,
            "metadata": metadata_update({}, form),
            "name": text(form, "name"),
            "phone": text(form, "phone"),
            "preferred_locales": [],
            "shipping": None,
            "tax_exempt": "none",
            "test_clock": None,
        }
        pm_id = text(form, "payment_method")
        pm = None
        if pm_id:
            pm = self._attachable(pm_id, "payment_method", customer["id"])
        default = self._invoice_default(form)
        self.customers[customer["id"]] = customer
        if pm is not None:
            pm = self._attach(pm, customer["id"], origin)
            if default == pm_id:
                default = pm["id"]
        if default:
            self._check_attached(default, customer["id"])
            customer["invoice_settings"]["default_payment_method"] = default
        self.emit("customer.created", customer, origin)
        return customer

    def _invoice_default(self, form: Form) -> str | None:
        settings = form.get("invoice_settings")
        if settings is None:
            return None
        if not isinstance(settings, dict):
            raise errors.invalid("Invalid hash", "invoice_settings")
        for name in settings:
            if name != "default_payment_method":
                raise errors.unknown_parameter(f"invoice_settings[{name}]")
        value = settings.get("default_payment_method")
        if value is not None and not isinstance(value, str):
            raise errors.invalid("Invalid string", "invoice_settings[default_payment_method]")
        return value

    def _check_attached(self, pm_id: str, customer_id: str) -> None:
        param = "invoice_settings[default_payment_method]"
        pm = self.payment_methods.get(pm_id)
        if pm is None:
            raise errors.missing("PaymentMethod", pm_id, param)
        if pm["customer"] != customer_id:
            raise errors.invalid(
                f"The customer does not have a payment method with the ID {pm_id}. The payment "
                "method must be attached to the customer.",
                param,
                "resource_missing",
            )

    def update_customer(self, customer_id: str, form: Form, origin: Origin) -> Obj:
        customer = self.customer(customer_id)
        check_params(
            form,
            {"email", "name", "description", "metadata", "invoice_settings", "phone", "expand"},
        )
        default = self._invoice_default(form)
        if default:
            self._check_attached(default, customer_id)
        before = copy.deepcopy(customer)
        for name in ("email", "name", "description", "phone"):
            if name in form:
                value = text(form, name)
                customer[name] = value or None
        customer["metadata"] = metadata_update(customer["metadata"], form)
        if default is not None:
            customer["invoice_settings"]["default_payment_method"] = default or None
        if customer != before:
            event = self.emit("customer.updated", customer, origin)
            event["data"]["previous_attributes"] = {
                k: v for k, v in before.items() if customer.get(k) != v
            }
        return customer

    # --- payment methods --------------------------------------------------------------------

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

    def _attachable(self, pm_id: str, param: str | None, customer_id: str) -> Obj:
        if pm_id not in TOKENS and pm_id not in self.payment_methods:
            raise errors.missing("PaymentMethod", pm_id, param)
        existing = self.payment_methods.get(pm_id)
        if existing is not None and existing["customer"] not in (None, customer_id):
            raise errors.invalid(
                "The payment method you provided has already been attached to a customer.",
                param,
            )
        card = TOKENS.get(pm_id) or self.cards[pm_id]
        if card.behavior is Behavior.DECLINED_ON_ATTACH:
            raise StripeFailure(402, errors.card_declined("card_declined", card.decline_code))
        return existing if existing is not None else self._clone(pm_id)

    def _attach(self, pm: Obj, customer_id: str, origin: Origin) -> Obj:
        if pm["customer"] != customer_id:
            pm["customer"] = customer_id
            self.emit("payment_method.attached", pm, origin)
        return pm

    def attach(self, pm_id: str, form: Form, origin: Origin) -> Obj:
        check_params(form, {"customer", "expand"})
        customer_id = text(form, "customer", required=True)
        assert customer_id is not None
        self.customer(customer_id, "customer")
        pm = self._attachable(pm_id, None, customer_id)
        return self._attach(pm, customer_id, origin)

    def detach(self, pm_id: str, form: Form, origin: Origin) -> Obj:
        check_params(form, {"expand"})
        pm = self.payment_methods.get(pm_id)
        if pm is None:
            raise errors.missing("PaymentMethod", pm_id)
        customer_id = pm["customer"]
        if customer_id is None:
            raise errors.invalid(
                f"The payment method {pm_id} is not attached to a customer so detachment is "
                "impossible."
            )
        pm["customer"] = None
        customer = self.customers[customer_id]
        if customer["invoice_settings"]["default_payment_method"] == pm_id:
            customer["invoice_settings"]["default_payment_method"] = None
            self.emit("customer.updated", customer, origin)
        self.emit("payment_method.detached", pm, origin)
        return pm

    def customer_payment_methods(self, customer_id: str, form: Form) -> list[Obj]:
        self.customer(customer_id)
        kind = text(form, "type")
        if kind is not None and kind != "card":
            return []
        found = [pm for pm in self.payment_methods.values() if pm["customer"] == customer_id]
        found.reverse()  # newest first
        return found

    # --- payment intents --------------------------------------------------------------------

    def payment_intent(self, pi_id: str, param: str | None = None) -> Obj:
        found = self.payment_intents.get(pi_id)
        if found is None:
            raise errors.missing("payment_intent", pi_id, param)
        return found

    def create_payment_intent(self, form: Form, origin: Origin) -> Obj:
        check_params(
            form,
            {"amount", "currency", "customer", "payment_method", "confirm", "off_session"}
            | {"metadata", "description", "expand", "payment_method_types", "receipt_email"}
            | {"setup_future_usage", "statement_descriptor_suffix", "capture_method"}
            | {"automatic_payment_methods", "return_url", "error_on_requires_action"},
        )
        amount = integer(form, "amount", required=True)
        currency = text(form, "currency", required=True)
        assert amount is not None and currency is not None
        if amount < MIN_AMOUNT:
            raise errors.invalid(
                f"Amount must be at least $0.50 {currency.lower()}", "amount", "amount_too_small"
            )
        if amount > 99_999_999:
            raise errors.invalid(
                "Amount must be no more than $999,999.99", "amount", "amount_too_large"
            )
        if len(currency) != 3 or not currency.isalpha():
            raise errors.invalid(f"Invalid currency: {currency[:20].lower()}", "currency")
        customer_id = text(form, "customer") or None
        if customer_id is not None:
            self.customer(customer_id, "customer")
        confirm = boolean(form, "confirm")
        off_session = boolean(form, "off_session")
        if off_session and not confirm:
            raise errors.invalid(
                "You can only specify `off_session` when `confirm` is true.", "off_session"
            )
        pm_id = text(form, "payment_method") or None
        pm = self._usable(pm_id, customer_id) if pm_id else None
        if confirm and pm is None:
            raise errors.invalid(
                "You cannot confirm this PaymentIntent because it's missing a payment method. "
                "To confirm the PaymentIntent with cus, specify a payment method attached to "
                "this customer along with the customer ID.",
                "payment_method",
                "payment_intent_unexpected_state",
            )
        pi_id = new_id("pi")
        pi: Obj = {
            "id": pi_id,
            "object": "payment_intent",
            "amount": amount,
            "amount_capturable": 0,
            "amount_received": 0,
            "canceled_at": None,
            "cancellation_reason": None,
            "capture_method": text(form, "capture_method") or "automatic",
            "client_secret": f"{pi_id}_secret_{secrets.token_urlsafe(18)}",
            "confirmation_method": "automatic",
            "created": self._created(),
            "currency": currency.lower(),
            "customer": customer_id,
            "description": text(form, "description") or None,
            "last_payment_error": None,
            "latest_charge": None,
            "livemode": False,
            "metadata": metadata_update({}, form),
            "next_action": None,
            "payment_method": pm["id"] if pm else None,
            "payment_method_types": ["card"],
            "receipt_email": text(form, "receipt_email") or None,
            "setup_future_usage": text(form, "setup_future_usage") or None,
            "status": "requires_confirmation" if pm else "requires_payment_method",
        }
        self.payment_intents[pi_id] = pi
        self.emit("payment_intent.created", pi, origin)
        if confirm:
            assert pm is not None
            self._confirm(pi, pm, off_session, origin)
        return pi

    def _usable(self, pm_id: str, customer_id: str | None) -> Obj:
        """The payment method a PaymentIntent may use (a token becomes a new clone)."""
        if pm_id in TOKENS:
            return self._clone(pm_id)
        pm = self.payment_methods.get(pm_id)
        if pm is None:
            raise errors.missing("PaymentMethod", pm_id, "payment_method")
        owner = pm["customer"]
        if owner is not None and owner != customer_id:
            if customer_id is None:
                message = (
                    f"The provided PaymentMethod {pm_id} was previously used with a customer; "
                    "specify that customer to use it again."
                )
            else:
                message = (
                    f"The provided PaymentMethod belongs to a different Customer ({owner}) than "
                    f"the one provided ({customer_id})."
                )
            raise errors.invalid(message, "payment_method")
        return pm

    def confirm_payment_intent(self, pi_id: str, form: Form, origin: Origin) -> Obj:
        check_params(form, {"payment_method", "off_session", "expand", "return_url"})
        pi = self.payment_intent(pi_id)
        if pi["status"] not in ("requires_payment_method", "requires_confirmation"):
            raise errors.invalid(
                f"This PaymentIntent's status is {pi['status']} and it cannot be confirmed.",
                code="payment_intent_unexpected_state",
            )
        pm_id = text(form, "payment_method") or pi["payment_method"]
        if not pm_id:
            raise errors.invalid(
                "You cannot confirm this PaymentIntent because it's missing a payment method.",
                "payment_method",
                "payment_intent_unexpected_state",
            )
        pm = self._usable(pm_id, pi["customer"])
        self._confirm(pi, pm, boolean(form, "off_session"), origin)
        return pi

    def _confirm(self, pi: Obj, pm: Obj, off_session: bool, origin: Origin) -> None:
        pi["payment_method"] = pm["id"]
        card = self.cards[pm["id"]]
        if card.behavior is Behavior.AUTHENTICATION and not off_session:
            pi["status"] = "requires_action"
            pi["next_action"] = {
                "type": "use_stripe_sdk",
                "use_stripe_sdk": {
                    "type": "three_d_secure_redirect",
                    "stripe_js": f"https://hooks.stripe.com/3d_secure_2/hosted?pi={pi['id']}",
                    "source": new_id("src"),
                },
            }
            self.emit("payment_intent.requires_action", pi, origin)
            return
        if card.behavior is Behavior.SUCCEEDS:
            self._succeed(pi, pm, origin)
            return
        if card.behavior is Behavior.AUTHENTICATION:
            code = decline_code = "authentication_required"
        else:
            code, decline_code = "card_declined", card.decline_code
        error = self._fail(pi, pm, code, decline_code, origin)
        raise StripeFailure(402, error, commit=True)

    def _charge(self, pi: Obj, pm: Obj, status: str) -> Obj:
        charge: Obj = {
            "id": new_id("ch"),
            "object": "charge",
            "amount": pi["amount"],
            "amount_captured": pi["amount"] if status == "succeeded" else 0,
            "amount_refunded": 0,
            "balance_transaction": None,
            "billing_details": copy.deepcopy(pm["billing_details"]),
            "captured": status == "succeeded",
            "created": self._created(),
            "currency": pi["currency"],
            "customer": pi["customer"],
            "description": pi["description"],
            "disputed": False,
            "failure_code": None,
            "failure_message": None,
            "livemode": False,
            "metadata": dict(pi["metadata"]),
            "outcome": None,
            "paid": status == "succeeded",
            "payment_intent": pi["id"],
            "payment_method": pm["id"],
            "payment_method_details": {"card": copy.deepcopy(pm["card"]), "type": "card"},
            "refunded": False,
            "status": status,
        }
        self.charges[charge["id"]] = charge
        pi["latest_charge"] = charge["id"]
        return charge

    def _succeed(self, pi: Obj, pm: Obj, origin: Origin) -> None:
        charge = self._charge(pi, pm, "succeeded")
        charge["outcome"] = {
            "network_status": "approved_by_network",
            "reason": None,
            "risk_level": "normal",
            "seller_message": "Payment complete.",
            "type": "authorized",
        }
        pi["status"] = "succeeded"
        pi["amount_received"] = pi["amount"]
        pi["next_action"] = None
        pi["last_payment_error"] = None
        self.emit("charge.succeeded", charge, origin)
        self.emit("payment_intent.succeeded", pi, origin)

    def _fail(self, pi: Obj, pm: Obj, code: str, decline_code: str, origin: Origin) -> Obj:
        """Decline the payment: a failed charge, the PI back to requires_payment_method, events.
        Returns the error object as the 402 answer carries it (with the PI)."""
        charge = self._charge(pi, pm, "failed")
        charge["failure_code"] = code
        charge["failure_message"] = errors.DECLINE_MESSAGES[decline_code]
        charge["outcome"] = {
            "network_status": "declined_by_network",
            "reason": decline_code,
            "risk_level": "normal",
            "seller_message": "The bank did not return any further details with this decline.",
            "type": "issuer_declined",
        }
        error = errors.card_declined(code, decline_code, charge=charge["id"])
        error["payment_method"] = copy.deepcopy(pm)
        pi["last_payment_error"] = error
        pi["status"] = "requires_payment_method"
        pi["payment_method"] = None
        pi["next_action"] = None
        self.emit("charge.failed", charge, origin)
        self.emit("payment_intent.payment_failed", pi, origin)
        return {**error, "payment_intent": copy.deepcopy(pi)}

    def complete_authentication(self, pi_id: str, succeed: bool = True) -> Obj:
        pi = self.payment_intent(pi_id)
        if pi["status"] != "requires_action":
            raise errors.invalid(f"PaymentIntent {pi_id} is {pi['status']}, not requires_action")
        pm = self.payment_methods[pi["payment_method"]]
        if succeed:
            self._succeed(pi, pm, AUTOMATIC)
        else:
            charge_less = errors.card_declined(
                "payment_intent_authentication_failure", "authentication_required"
            )
            charge_less.pop("decline_code")
            charge_less["message"] = (
                "The provided PaymentMethod has failed authentication. You can provide "
                "payment_method_data or a new PaymentMethod to attempt to fulfill this "
                "PaymentIntent again."
            )
            charge_less["type"] = "invalid_request_error"
            charge_less["payment_method"] = copy.deepcopy(pm)
            pi["last_payment_error"] = charge_less
            pi["status"] = "requires_payment_method"
            pi["payment_method"] = None
            pi["next_action"] = None
            self.emit("payment_intent.payment_failed", pi, AUTOMATIC)
        return pi

    def list_payment_intents(self, form: Form) -> list[Obj]:
        customer_id = text(form, "customer")
        found = list(self.payment_intents.values())
        if customer_id is not None:
            found = [pi for pi in found if pi["customer"] == customer_id]
        created = form.get("created")
        if created is not None:
            _in_range(0, created)  # a bad filter is 400 even when nothing is listed
            found = [pi for pi in found if _in_range(pi["created"], created)]
        found.reverse()
        return found

    # --- refunds and disputes ---------------------------------------------------------------

    def charge(self, charge_id: str, param: str | None = None) -> Obj:
        found = self.charges.get(charge_id)
        if found is None:
            raise errors.missing("charge", charge_id, param)
        return found

    def create_refund(self, form: Form, origin: Origin) -> Obj:
        check_params(
            form,
            {"payment_intent", "charge", "amount", "reason", "metadata", "expand"}
            | {"instructions_email"},
        )
        pi_id, charge_id = text(form, "payment_intent"), text(form, "charge")
        if pi_id and charge_id:
            raise errors.invalid("You can only specify one of payment_intent or charge.", "charge")
        if pi_id:
            pi = self.payment_intent(pi_id, "payment_intent")
            if pi["status"] != "succeeded" or not pi["latest_charge"]:
                raise errors.invalid(
                    f"This PaymentIntent ({pi_id}) does not have a successful charge to refund.",
                    "payment_intent",
                )
            charge = self.charges[pi["latest_charge"]]
        elif charge_id:
            charge = self.charge(charge_id, "charge")
        else:
            raise errors.invalid(
                "One of the following params should be provided for this request: payment_intent "
                "or charge.",
                code="parameter_missing",
            )
        reason = text(form, "reason")
        if reason is not None and reason not in (
            "duplicate",
            "fraudulent",
            "requested_by_customer",
        ):
            raise errors.invalid(f"Invalid reason: {reason[:40]}", "reason")
        amount = integer(form, "amount")
        return self._refund(charge, amount, reason, metadata_update({}, form), origin)

    def _refund(
        self,
        charge: Obj,
        amount: int | None,
        reason: str | None,
        metadata: dict[str, str],
        origin: Origin,
    ) -> Obj:
        if charge["status"] != "succeeded":
            raise errors.invalid(f"Charge {charge['id']} has not succeeded.", "charge")
        left = charge["amount"] - charge["amount_refunded"]
        if left <= 0:
            raise errors.invalid(
                f"Charge {charge['id']} has already been refunded.",
                code="charge_already_refunded",
            )
        if amount is None:
            amount = left
        if amount <= 0:
            raise errors.invalid("Refund amount must be positive.", "amount")
        if amount > left:
            raise errors.invalid(
                f"Refund amount ({amount} {charge['currency']}) is greater than unrefunded "
                f"amount on charge ({left} {charge['currency']})",
                "amount",
                "amount_too_large",
            )
        refund: Obj = {
            "id": new_id("re"),
            "object": "refund",
            "amount": amount,
            "balance_transaction": None,
            "charge": charge["id"],
            "created": self._created(),
            "currency": charge["currency"],
            "destination_details": {"card": {"type": "refund"}, "type": "card"},
            "metadata": metadata,
            "payment_intent": charge["payment_intent"],
            "reason": reason,
            "status": "succeeded",
        }
        self.refunds[refund["id"]] = refund
        charge["amount_refunded"] += amount
        charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
        self.emit("charge.refunded", charge, origin)
        self.emit("refund.created", refund, origin)
        return refund

    def refund(self, refund_id: str) -> Obj:
        found = self.refunds.get(refund_id)
        if found is None:
            raise errors.missing("refund", refund_id)
        return found

    def refund_from_dashboard(self, pi_id: str, amount: int | None = None) -> Obj:
        pi = self.payment_intent(pi_id)
        if not pi["latest_charge"]:
            raise errors.invalid(f"PaymentIntent {pi_id} has no charge")
        charge = self.charges[pi["latest_charge"]]
        return self._refund(charge, amount, "requested_by_customer", {}, Origin(new_id("req")))

    def create_dispute(self, pi_id: str) -> Obj:
        pi = self.payment_intent(pi_id)
        charge = self.charges.get(pi["latest_charge"] or "")
        if charge is None or charge["status"] != "succeeded":
            raise errors.invalid(f"PaymentIntent {pi_id} has no successful charge to dispute")
        dispute: Obj = {
            "id": new_id("dp"),
            "object": "dispute",
            "amount": charge["amount"] - charge["amount_refunded"],
            "balance_transactions": [],
            "charge": charge["id"],
            "created": self._created(),
            "currency": charge["currency"],
            "evidence_details": {
                "due_by": self._created() + 7 * 86400,
                "has_evidence": False,
                "past_due": False,
                "submission_count": 0,
            },
            "is_charge_refundable": False,
            "livemode": False,
            "metadata": {},
            "payment_intent": pi_id,
            "reason": "fraudulent",
            "status": "needs_response",
        }
        self.disputes[dispute["id"]] = dispute
        charge["disputed"] = True
        self.emit("charge.dispute.created", dispute, AUTOMATIC)
        return dispute

    # --- setup intents ----------------------------------------------------------------------

    def create_setup_intent(self, form: Form, origin: Origin) -> Obj:
        check_params(
            form,
            {"customer", "usage", "payment_method_types", "metadata", "description", "expand"}
            | {"automatic_payment_methods"},
        )
        customer_id = text(form, "customer") or None
        if customer_id is not None:
            self.customer(customer_id, "customer")
        usage = text(form, "usage") or "off_session"
        if usage not in ("off_session", "on_session"):
            raise errors.invalid(f"Invalid usage: {usage[:40]}", "usage")
        types = form.get("payment_method_types", ["card"])
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise errors.invalid("Invalid array", "payment_method_types")
        seti_id = new_id("seti")
        seti: Obj = {
            "id": seti_id,
            "object": "setup_intent",
            "cancellation_reason": None,
            "client_secret": f"{seti_id}_secret_{secrets.token_urlsafe(18)}",
            "created": self._created(),
            "customer": customer_id,
            "description": text(form, "description") or None,
            "last_setup_error": None,
            "latest_attempt": None,
            "livemode": False,
            "metadata": metadata_update({}, form),
            "next_action": None,
            "payment_method": None,
            "payment_method_types": types,
            "status": "requires_payment_method",
            "usage": usage,
        }
        self.setup_intents[seti_id] = seti
        self.emit("setup_intent.created", seti, origin)
        return seti

    def setup_intent(self, seti_id: str) -> Obj:
        found = self.setup_intents.get(seti_id)
        if found is None:
            raise errors.missing("setup_intent", seti_id)
        return found

    def confirm_setup_intent(self, seti_id: str, token: str = "pm_card_visa") -> Obj:
        seti = self.setup_intent(seti_id)
        if seti["status"] not in ("requires_payment_method", "requires_confirmation"):
            raise errors.invalid(f"SetupIntent {seti_id} is {seti['status']}")
        card = TOKENS[token]
        if card.behavior is Behavior.DECLINED_ON_ATTACH:
            pm = self._clone(token)
            error = errors.card_declined("card_declined", card.decline_code)
            error["payment_method"] = copy.deepcopy(pm)
            seti["last_setup_error"] = error
            self.emit("setup_intent.setup_failed", seti, AUTOMATIC)
            return seti
        pm = self._clone(token)
        if seti["customer"] is not None:
            self._attach(pm, seti["customer"], AUTOMATIC)
        seti["payment_method"] = pm["id"]
        seti["status"] = "succeeded"
        seti["last_setup_error"] = None
        self.emit("setup_intent.succeeded", seti, AUTOMATIC)
        return seti


def _in_range(created: int, bounds: object) -> bool:
    """`created` against `created=<ts>` or `created[gte|gt|lte|lt]=<ts>`."""
    if isinstance(bounds, str):
        return created == _timestamp(bounds, "created")
    if not isinstance(bounds, dict):
        raise errors.invalid("Invalid created filter", "created")
    checks = {
        "gte": lambda v: created >= v,
        "gt": lambda v: created > v,
        "lte": lambda v: created <= v,
        "lt": lambda v: created < v,
    }
    for op, value in bounds.items():
        check = checks.get(op)
        if check is None:
            raise errors.unknown_parameter(f"created[{op}]")
        if not isinstance(value, str):
            raise errors.invalid("Invalid integer", f"created[{op}]")
        if not check(_timestamp(value, f"created[{op}]")):
            return False
    return True


def _timestamp(value: str, param: str) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 12:
        raise errors.invalid(f"Invalid timestamp: must be an integer: {value[:20]}", param)
    return int(value)
