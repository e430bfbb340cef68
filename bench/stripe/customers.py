"""Customers, payment methods (test tokens cloned on use, attach and detach, the invoice
default) and setup intents, as Stripe handles them."""

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
    check_params,
    metadata_update,
    new_id,
    text,
)


class Customers(Ledger):
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
