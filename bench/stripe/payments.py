"""Payment intents as Stripe runs them: created and confirmed (on or off session), what each
test card does (success with a charge, a 402 decline that leaves a failed charge and the intent
in requires_payment_method, 3-D Secure), and the list with `created` filters."""

from __future__ import annotations

import copy
import secrets

from bench.stripe import errors
from bench.stripe.cards import TOKENS, Behavior
from bench.stripe.errors import StripeFailure
from bench.stripe.ledger import Ledger
from bench.stripe.params import (
    AUTOMATIC,
    Form,
    Obj,
    Origin,
    boolean,
    check_params,
    in_range,
    integer,
    metadata_update,
    new_id,
    text,
)

MIN_AMOUNT = 50


class Payments(Ledger):
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
            in_range(0, created)  # a bad filter is 400 even when nothing is listed
            found = [pi for pi in found if in_range(pi["created"], created)]
        found.reverse()
        return found
